package checkpoint_test

import (
	"bytes"
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/checkpoint"
	"github.com/distopt/distopt/optimizer/cpu"
)

// Save logs the checkpoint it wrote through the optimizer's logger, once.
func TestSaveLogs(t *testing.T) {
	var buf bytes.Buffer
	ctx := context.Background()
	comm := inproc.Communicators(1)[0]
	cfg := optimizer.Config{Logger: slog.New(slog.NewTextHandler(&buf, nil))}
	o, err := optimizer.New(ctx, comm, cpu.New(1), []optimizer.Param{{Name: "w", Shape: []int{8, 16}}}, optimizer.FromMap(map[string][]float32{"w": make([]float32, 128)}), cfg)
	require.NoError(t, err)
	defer o.Close()
	info, err := checkpoint.Save(ctx, o, comm, t.TempDir(), checkpoint.SaveOptions{})
	require.NoError(t, err)
	assert.Contains(t, buf.String(), `msg="checkpoint: written" dir=`+info.Dir+" step=0 world=1")
	assert.Equal(t, 1, bytes.Count(buf.Bytes(), []byte("checkpoint: written")))
}
