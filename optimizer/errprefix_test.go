package optimizer_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/distopt/distopt/collective/inproc"
)

// Every error names the package once, however many layers wrap it, and
// still matches its sentinel with errors.Is.
func TestErrorPrefixOnce(t *testing.T) {
	ctx := context.Background()
	params := []optimizer.Param{{Name: "w", Shape: []int{4, 8}}}
	init := optimizer.FromMap(map[string][]float32{"w": make([]float32, 32)})
	_, errCfg := optimizer.New(ctx, inproc.Communicators(1)[0], cpu.New(1), params, init, optimizer.Config{Beta1: 2})
	o, err := optimizer.New(ctx, inproc.Communicators(1)[0], cpu.New(1), params, init, optimizer.Config{})
	require.NoError(t, err)
	defer o.Close()
	errUnknown := o.SetGrad("nope", nil)
	errLen := o.SetGrad("w", make([]float32, 3))
	o.Invalidate(errors.New("optimizer: loaded state is stale"))
	_, errBroken := o.Step(ctx)
	for _, tc := range []struct {
		name     string
		err      error
		sentinel error
	}{
		{"config", errCfg, optimizer.ErrConfig},
		{"unknown parameter", errUnknown, optimizer.ErrUnknownParam},
		{"gradient length", errLen, optimizer.ErrConfig},
		{"broken", errBroken, optimizer.ErrBroken},
	} {
		require.Error(t, tc.err, tc.name)
		assert.ErrorIs(t, tc.err, tc.sentinel, tc.name)
		assert.True(t, strings.HasPrefix(tc.err.Error(), "optimizer: "), "%s: %q", tc.name, tc.err)
		assert.Equal(t, 1, strings.Count(tc.err.Error(), "optimizer:"), "%s: %q", tc.name, tc.err)
	}
	assert.Contains(t, errBroken.Error(), "loaded state is stale")
}
