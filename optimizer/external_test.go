package optimizer_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/distopt/distopt/bf16"
	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/cpu"
	"github.com/distopt/distopt/optimizer/optimizertest"
	"github.com/distopt/distopt/shard"
)

// bucketGrads lays out every parameter's gradient grad(p, step, rank) in
// its bucket at its place, in type dt, with zeros in the padding: what a
// framework writing the layout itself hands BindGrads. It encodes with the
// bf16 package, not through the optimizer's views.
func bucketGrads(l *shard.Layout, params []optimizer.Param, dt buffer.DType, grad optimizertest.GradFunc, step, rank int) []buffer.Buffer {
	out := make([]buffer.Buffer, len(l.Buckets))
	for b, bk := range l.Buckets {
		out[b] = make(buffer.HostBuffer, bk.Size*dt.Size())
	}
	for i, p := range params {
		pl := l.Places[i]
		dst := out[pl.Bucket].(buffer.HostBuffer)[pl.Offset*dt.Size():]
		for j, x := range grad(p, step, rank) {
			if dt == buffer.Float32 {
				copy(dst[4*j:], collective.ToBytes([]float32{x}))
			} else {
				copy(dst[2*j:], collective.ToBytes([]uint16{bf16.FromFloat32(x)}))
			}
		}
	}
	return out
}

// trainExternal is optimizertest.Train with the gradients lent: every step
// binds freshly laid out buffers (bucketGrads); ready declares every
// parameter ready (GradReady) before the step, in backward order.
func trainExternal(ctx context.Context, comm collective.Communicator, params []optimizer.Param, cfg optimizer.Config, steps int, ready bool) (optimizertest.Result, error) {
	cfg.ExternalGradients = true
	o, err := optimizer.New(ctx, comm, cpu.New(2), params, optimizer.FromMap(optimizertest.InitWeights(params, 1)), cfg)
	if err != nil {
		return optimizertest.Result{}, err
	}
	defer o.Close()
	var results []optimizer.StepResult
	for s := range steps {
		if err := o.BindGrads(bucketGrads(o.Layout(), params, optimizertest.GradType(cfg), optimizertest.RankGrad, s, comm.Rank())); err != nil {
			return optimizertest.Result{}, err
		}
		for i := len(params) - 1; ready && i >= 0; i-- {
			if err := o.GradReady(params[i].Name); err != nil {
				return optimizertest.Result{}, err
			}
		}
		sr, err := o.Step(ctx)
		if err != nil {
			return optimizertest.Result{}, fmt.Errorf("step %d: %w", s, err)
		}
		if _, err := o.Grad(params[0].Name); !errors.Is(err, optimizer.ErrUnbound) {
			return optimizertest.Result{}, fmt.Errorf("step %d: Grad after the step: %v, want ErrUnbound", s, err)
		}
		results = append(results, sr)
	}
	res, err := optimizertest.Collect(o, params)
	res.Results = results
	return res, err
}

// TestExternalGradients checks that steps on lent gradient buffers, laid
// out by the caller, leave every rank in the state the optimizer's own
// buffers give (SetGrad), bit for bit, for every configuration, on one rank
// and on three, with and without GradReady.
func TestExternalGradients(t *testing.T) {
	params := optimizertest.AwkwardParams()
	const steps = 4
	for name, cfg := range optimizertest.Configs() {
		t.Run(name, func(t *testing.T) {
			for _, d := range []int{1, 3} {
				ref := optimizertest.Run(t, d, steps, params, cfg, optimizertest.RankGrad)
				for _, ready := range []bool{false, true} {
					got := optimizertest.RunRanks(t, d, cfg, func(ctx context.Context, comm collective.Communicator, c optimizer.Config) (optimizertest.Result, error) {
						return trainExternal(ctx, comm, params, c, steps, ready)
					})
					for r := range got {
						compare(t, d, ref[r], got[r:r+1])
					}
				}
			}
		})
	}
}

// TestExternalGradientsMemory checks that the memory report of lent
// gradients is the report of the optimizer's own ones less their buffer
// (TestMemoryReport checks it against the buffers New allocates).
func TestExternalGradientsMemory(t *testing.T) {
	params := optimizertest.AwkwardParams()
	cfg := optimizertest.Configs()["fp8 moments"]
	own, err := optimizer.PredictMemory(params, 1, cfg)
	require.NoError(t, err)
	cfg.ExternalGradients = true
	lent, err := optimizer.PredictMemory(params, 1, cfg)
	require.NoError(t, err)
	require.Positive(t, own.Get(optimizer.BufGrads))
	require.Zero(t, lent.Get(optimizer.BufGrads))
	require.Equal(t, own.Total()-own.Get(optimizer.BufGrads), lent.Total())
}

// newExternal is a one-rank optimizer of params on the CPU backend with cfg.
func newExternal(t *testing.T, params []optimizer.Param, cfg optimizer.Config) *optimizer.Optimizer {
	t.Helper()
	o, err := optimizer.New(context.Background(), inproc.Communicators(1)[0], cpu.New(1), params, optimizer.FromMap(optimizertest.InitWeights(params, 1)), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { o.Close() })
	return o
}

// TestExternalGradientsErrors checks the misuses of lent gradients: each
// is refused naming the problem, binds nothing, and leaves the optimizer
// usable.
func TestExternalGradientsErrors(t *testing.T) {
	ctx := context.Background()
	params := optimizertest.AwkwardParams()
	cfg := optimizertest.Configs()[fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}.String()]
	cfg.ExternalGradients = true
	o := newExternal(t, params, cfg)
	l := o.Layout()
	gt := optimizertest.GradType(cfg)
	good := func() []buffer.Buffer { return bucketGrads(l, params, gt, optimizertest.RankGrad, 0, 0) }

	_, err := o.Step(ctx)
	require.ErrorIs(t, err, optimizer.ErrUnbound)
	require.ErrorContains(t, err, "Step")
	for what, call := range map[string]func() error{
		"SetGrad":   func() error { return o.SetGrad(params[0].Name, make([]float32, optimizertest.Numel(params[0].Shape))) },
		"Grad":      func() error { _, err := o.Grad(params[0].Name); return err },
		"ZeroGrad":  o.ZeroGrad,
		"GradReady": func() error { return o.GradReady(params[0].Name) },
	} {
		require.ErrorIs(t, call(), optimizer.ErrUnbound, what)
	}

	short := good()
	short[0] = short[0].Slice(0, short[0].Len()-2)
	for what, bufs := range map[string][]buffer.Buffer{
		"count":  good()[1:],
		"size":   short,
		"nil":    append(good()[1:], nil),
		"memory": append([]buffer.Buffer{buffer.DeviceBuffer{Size: good()[0].Len()}}, good()[1:]...),
	} {
		require.ErrorIs(t, o.BindGrads(bufs), optimizer.ErrConfig, what)
		_, err := o.Grad(params[0].Name)
		require.ErrorIs(t, err, optimizer.ErrUnbound, "%s: nothing bound", what)
	}

	require.NoError(t, o.BindGrads(good()))
	for i := len(params) - 1; i >= 0; i-- {
		require.NoError(t, o.GradReady(params[i].Name))
	}
	require.ErrorIs(t, o.BindGrads(good()), optimizer.ErrGradReady, "rebinding with reduce-scatters in flight")
	_, err = o.Step(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, o.StepCount())

	// A step that fails before its phases unbinds too: the caller may free
	// the buffers once it returns.
	bad := cfg
	bad.Groups = slices.Clone(cfg.Groups)
	for i := range bad.Groups {
		bad.Groups[i].LR = nanAt(2)
	}
	failing := newExternal(t, params, bad)
	require.NoError(t, failing.BindGrads(good()))
	_, err = failing.Step(ctx)
	require.NoError(t, err)
	require.NoError(t, failing.BindGrads(good()))
	_, err = failing.Step(ctx)
	require.ErrorIs(t, err, optimizer.ErrConfig, "a NaN learning rate")
	_, err = failing.Grad(params[0].Name)
	require.ErrorIs(t, err, optimizer.ErrUnbound, "after a failed step")

	plain := newExternal(t, params, optimizertest.Configs()[fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}.String()])
	require.ErrorIs(t, plain.BindGrads(good()), optimizer.ErrConfig, "without ExternalGradients")

	cfg.ShardedGradients = true
	_, err = optimizer.New(ctx, inproc.Communicators(1)[0], cpu.New(1), params, optimizer.FromMap(optimizertest.InitWeights(params, 1)), cfg)
	require.ErrorIs(t, err, optimizer.ErrConfig)
	require.ErrorContains(t, err, "ShardedGradients")
}

// nanAt is a learning rate schedule that is 1e-3 but at step nanAt.
type nanAt int

func (s nanAt) LR(t int) float64 {
	if t == int(s) {
		return math.NaN()
	}
	return 1e-3
}

func (s nanAt) String() string { return fmt.Sprintf("NaN at step %d", int(s)) }
