package grpccomm_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/grpccomm"
)

// Config.Logger receives a failure, once per rank, naming the rank blamed
// and why; a communicator that only closes logs nothing.
func TestLoggerFailure(t *testing.T) {
	var buf bytes.Buffer // the handler serialises the ranks' writes
	cfg := grpccomm.Config{Logger: slog.New(slog.NewTextHandler(&buf, nil))}
	comms := inProcess(t, 2, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := onAll(comms, func(c *grpccomm.Comm) error {
		return c.Start(collective.Op{Kind: collective.OpAllGather, Dst: make(buffer.HostBuffer, 16*(c.Rank()+1)), Src: make(buffer.HostBuffer, 8*(c.Rank()+1))}).Wait(ctx)
	})
	for r, err := range errs {
		assert.ErrorIs(t, err, collective.ErrInvalid, "rank %d", r)
	}
	out := buf.String()
	assert.Equal(t, 2, strings.Count(out, `msg="grpccomm: communicator failed"`), out)
	assert.Contains(t, out, "rank=0 blames=1")
	assert.Contains(t, out, "rank=1 blames=0")
	assert.Contains(t, out, "mismatched ops")

	var quiet bytes.Buffer
	closed := inProcess(t, 2, grpccomm.Config{Logger: slog.New(slog.NewTextHandler(&quiet, nil))})
	for _, c := range closed {
		assert.NoError(t, c.Close())
	}
	assert.Empty(t, quiet.String())
}
