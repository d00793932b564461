package optimizer_test

import (
	"bytes"
	"context"
	"log/slog"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/backend"
	"github.com/distopt/distopt/optimizer/cpu"
)

// Config.Logger receives the slower paths of the backend at New, a
// skipped step with its reason, and a step without gradients; a step
// taken normally logs nothing.
func TestLogger(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx := context.Background()
	params := []optimizer.Param{{Name: "w", Shape: []int{4, 8}}}
	be := cpu.New(1)
	o, err := optimizer.New(ctx, inproc.Communicators(1)[0], be, params, optimizer.FromMap(map[string][]float32{"w": make([]float32, 32)}), optimizer.Config{Logger: logger})
	require.NoError(t, err)
	defer o.Close()
	_, asyncReader := any(be).(backend.AsyncReader)
	assert.Equal(t, !asyncReader, strings.Contains(buf.String(), "no AsyncReader"), "fallback lines:\n%s", buf.String())
	_, shardUpdater := any(be).(backend.ShardUpdater)
	assert.Equal(t, !shardUpdater, strings.Contains(buf.String(), "no ShardUpdater"), "fallback lines:\n%s", buf.String())
	_, planner := any(be).(backend.UpdatePlanner)
	assert.Equal(t, !planner, strings.Contains(buf.String(), "no UpdatePlanner"), "fallback lines:\n%s", buf.String())

	buf.Reset()
	g := make([]float32, 32)
	g[3] = float32(math.NaN())
	require.NoError(t, o.SetGrad("w", g))
	res, err := o.Step(ctx)
	require.NoError(t, err)
	require.True(t, res.Skipped)
	assert.Contains(t, buf.String(), "level=WARN msg=\"optimizer: step skipped\"")
	assert.Contains(t, buf.String(), "1 gradient elements are not finite")

	buf.Reset()
	g[3] = 1
	require.NoError(t, o.SetGrad("w", g))
	_, err = o.Step(ctx)
	require.NoError(t, err)
	assert.Empty(t, buf.String(), "a normal step")

	_, err = o.Step(ctx)
	require.NoError(t, err)
	assert.Contains(t, buf.String(), "no gradient written since the last step")
}
