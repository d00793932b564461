package checkpoint

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/optimizertest"
	"github.com/distopt/distopt/shard"
)

// testParams is optimizertest.AwkwardParams with "prime" (1031) and "big"
// (131x150) smaller: it has a matrix taller than a 128x128 tile, a
// parameter larger than a bucket, primes, one element, a scalar, and
// high-precision parameters smaller than a shard.
func testParams() []optimizer.Param {
	params := optimizertest.AwkwardParams()
	params[3].Shape, params[4].Shape = []int{1031}, []int{131, 150}
	return params
}

// weights returns initial values drawn from rand.NewPCG(seed, 11).
func weights(params []optimizer.Param, seed uint64) map[string][]float32 {
	return optimizertest.NormalWeights(params, rand.New(rand.NewPCG(seed, 11)))
}

// grad is every rank's gradient of p at step s: the same on every rank, so
// that the averaged gradient, and hence the run, does not depend on the
// world size. Step 1 carries an Inf when inf is set (a skipped step).
func grad(p optimizer.Param, s int, inf bool) []float32 {
	r := rand.New(rand.NewPCG(uint64(s), uint64(len(p.Name))*31+uint64(numElements(p.Shape))))
	g := make([]float32, numElements(p.Shape))
	for i := range g {
		g[i] = float32(r.IntN(129)-64) * float32(math.Ldexp(1, -8-r.IntN(6)))
	}
	if inf && s == 1 {
		g[len(g)-1] = float32(math.Inf(1))
	}
	return g
}

func testConfigs() map[string]optimizer.Config {
	base := optimizer.Config{Groups: optimizertest.Groups(), MaxGradNorm: 4, Layout: shard.Options{BucketElements: 6000}}
	with := func(f func(c *optimizer.Config)) optimizer.Config {
		c := base
		f(&c)
		return c
	}
	return map[string]optimizer.Config{
		"E4M3 current": with(func(c *optimizer.Config) {}),
		"E4M3 delayed": with(func(c *optimizer.Config) {
			c.Recipe = fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorDelayed, HistoryLen: 4}
		}),
		"E5M2 MXFP8": with(func(c *optimizer.Config) { c.Recipe = fp8.Recipe{Format: fp8.E5M2, Scaling: fp8.MXFP8} }),
		"E4M3 tiles": with(func(c *optimizer.Config) { c.Recipe = fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.Block128x128} }),
		"fp8 moments": with(func(c *optimizer.Config) {
			c.FirstMomentType, c.SecondMomentType = optimizer.MomentFP8, optimizer.MomentFP8
		}),
		"sgd fp8 momentum, blocks of 32, MXFP8": with(func(c *optimizer.Config) {
			c.Rule, c.Momentum, c.FirstMomentType, c.MomentBlock = optimizer.RuleSGD, 0.9, optimizer.MomentFP8, 32
			c.Recipe = fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.MXFP8}
		}),
		"sgd bf16 momentum": with(func(c *optimizer.Config) {
			c.Rule, c.Momentum, c.FirstMomentType = optimizer.RuleSGD, 0.9, optimizer.MomentBFloat16
		}),
		"bf16 moments, loss scaler, delayed most-recent": with(func(c *optimizer.Config) {
			c.FirstMomentType, c.SecondMomentType, c.GradType, c.HighPrecisionType = optimizer.MomentBFloat16, optimizer.MomentBFloat16, buffer.Float32, buffer.Float32
			c.LossScaler = &optimizer.LossScaler{InitScale: 1024, GrowthInterval: 2}
			c.Recipe = fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorDelayed, HistoryLen: 3, HistoryReduce: fp8.HistoryMostRecent, Margin: 1}
		}),
	}
}

// cluster is d in-process ranks, each with its optimizer.
type cluster struct {
	t      testing.TB
	params []optimizer.Param
	cfg    optimizer.Config
	comms  []collective.Communicator
	opts   []*optimizer.Optimizer
}

func testCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), time.Minute)
}

// newCluster makes d ranks initialised from init.
func newCluster(t testing.TB, d int, params []optimizer.Param, cfg optimizer.Config, init optimizer.InitFunc) *cluster {
	t.Helper()
	c := &cluster{t: t, params: params, cfg: cfg, comms: inproc.Communicators(d), opts: make([]*optimizer.Optimizer, d)}
	t.Cleanup(c.close)
	c.must(c.run(func(r int, _ *optimizer.Optimizer, comm collective.Communicator) error {
		ctx, cancel := testCtx()
		defer cancel()
		rc := cfg
		if cfg.LossScaler != nil {
			ls := *cfg.LossScaler
			rc.LossScaler = &ls
		}
		o, err := optimizer.New(ctx, comm, cpu.New(1), params, init, rc)
		c.opts[r] = o
		return err
	}))
	return c
}

func (c *cluster) close() {
	for _, o := range c.opts {
		if o != nil {
			o.Close()
		}
	}
	for _, comm := range c.comms {
		comm.Close()
	}
}

// run calls fn on every rank at once and returns the errors by rank.
func (c *cluster) run(fn func(r int, o *optimizer.Optimizer, comm collective.Communicator) error) []error {
	errs := make([]error, len(c.comms))
	var wg sync.WaitGroup
	for r := range c.comms {
		wg.Go(func() { errs[r] = fn(r, c.opts[r], c.comms[r]) })
	}
	wg.Wait()
	return errs
}

func (c *cluster) must(errs []error) {
	c.t.Helper()
	for r, err := range errs {
		if err != nil {
			c.t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// train takes steps from step from on.
func (c *cluster) train(from, steps int) {
	c.t.Helper()
	c.must(c.run(func(r int, o *optimizer.Optimizer, _ collective.Communicator) error {
		ctx, cancel := testCtx()
		defer cancel()
		for s := from; s < from+steps; s++ {
			for _, p := range c.params {
				if err := o.SetGrad(p.Name, grad(p, s, c.cfg.LossScaler != nil)); err != nil {
					return err
				}
			}
			if _, err := o.Step(ctx); err != nil {
				return err
			}
		}
		return nil
	}))
}

func (c *cluster) save(root string, opts SaveOptions) Info {
	c.t.Helper()
	infos := make([]Info, len(c.opts))
	c.must(c.run(func(r int, o *optimizer.Optimizer, comm collective.Communicator) error {
		ctx, cancel := testCtx()
		defer cancel()
		var err error
		infos[r], err = Save(ctx, o, comm, root, opts)
		return err
	}))
	return infos[0]
}

func (c *cluster) load(path string, opts LoadOptions) []error {
	return c.run(func(r int, o *optimizer.Optimizer, comm collective.Communicator) error {
		ctx, cancel := testCtx()
		defer cancel()
		_, err := Load(ctx, o, comm, path, opts)
		return err
	})
}

// state is everything a run's continuation depends on, assembled in full.
type state struct {
	master, m, v map[string][]float32
	fp8          map[string]*fp8.Tensor
	hp           map[string][]float32
	scalars      optimizer.ScalarState
}

// snapshot assembles the cluster's state and checks that every rank holds
// the same gathered parameters and scalars.
func (c *cluster) snapshot() state {
	c.t.Helper()
	st := state{master: map[string][]float32{}, m: map[string][]float32{}, v: map[string][]float32{}}
	for _, p := range c.params {
		n := numElements(p.Shape)
		st.master[p.Name], st.m[p.Name], st.v[p.Name] = make([]float32, n), make([]float32, n), make([]float32, n)
	}
	for r, o := range c.opts {
		res, err := optimizertest.Collect(o, c.params)
		if err != nil {
			c.t.Fatalf("rank %d: %v", r, err)
		}
		for _, pc := range res.Pieces {
			copy(st.master[pc.Param][pc.Offset:], pc.Master)
			copy(st.m[pc.Param][pc.Offset:], pc.M)
			copy(st.v[pc.Param][pc.Offset:], pc.V)
		}
		held := state{fp8: res.Tensors, hp: res.Weights, scalars: o.Scalars()}
		if r == 0 {
			st.fp8, st.hp, st.scalars = held.fp8, held.hp, held.scalars
			continue
		}
		if d := diffHeld(st, held); d != "" {
			c.t.Fatalf("rank %d holds other parameters than rank 0: %s", r, d)
		}
	}
	return st
}

// diffHeld compares what every rank holds in full: gathered parameters and
// scalars.
func diffHeld(a, b state) string {
	for name, x := range a.fp8 {
		y := b.fp8[name]
		if y == nil || !bytes.Equal(x.Data, y.Data) || optimizertest.FirstDiff(x.ScaleInv, y.ScaleInv) >= 0 || !bytes.Equal(x.ScaleE8M0, y.ScaleE8M0) {
			return fmt.Sprintf("FP8 bytes or scales of %s", name)
		}
	}
	for name, x := range a.hp {
		if i := optimizertest.FirstDiff(x, b.hp[name]); i >= 0 {
			return fmt.Sprintf("high-precision %s at %d", name, i)
		}
	}
	sa, sb := a.scalars, b.scalars
	if sa.Step != sb.Step || sa.LossScale != sb.LossScale || sa.LossScaleGood != sb.LossScaleGood || len(sa.AmaxHistories) != len(sb.AmaxHistories) {
		return fmt.Sprintf("scalars %+v vs %+v", sa, sb)
	}
	for i := range sa.AmaxHistories {
		if optimizertest.FirstDiff(sa.AmaxHistories[i], sb.AmaxHistories[i]) >= 0 || optimizertest.FirstDiff(sa.CastScales[i:i+1], sb.CastScales[i:i+1]) >= 0 {
			return fmt.Sprintf("amax history or cast scale %d: %v %v vs %v %v", i, sa.AmaxHistories[i], sa.CastScales[i], sb.AmaxHistories[i], sb.CastScales[i])
		}
	}
	return ""
}

// diffState compares two states bit for bit ("" when equal).
func diffState(a, b state) string {
	for name, x := range a.master {
		if i := optimizertest.FirstDiff(x, b.master[name]); i >= 0 {
			return fmt.Sprintf("master of %s at %d", name, i)
		}
		if i := optimizertest.FirstDiff(a.m[name], b.m[name]); i >= 0 {
			return fmt.Sprintf("moment m of %s at %d", name, i)
		}
		if i := optimizertest.FirstDiff(a.v[name], b.v[name]); i >= 0 {
			return fmt.Sprintf("moment v of %s at %d", name, i)
		}
	}
	return diffHeld(a, b)
}
