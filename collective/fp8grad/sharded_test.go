package fp8grad_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/fp8grad"
	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/shard"
)

// TestShardedErrorFeedback trains two in-process ranks through FP8
// gradient reduce-scatters with error feedback, once with a full gradient
// buffer per bucket and once with sharded gradients, whose pool of two
// buffers serves four buckets of the same size (so a buffer holds a
// different bucket from one use to the next). The residual follows the
// bucket (the op's Tag, optimizer.GradTag), not the buffer: the master
// weights and moments of every rank are the same bits after five steps.
// Keyed by the source buffer, the pool's buckets would swap residuals and
// the runs would differ.
func TestShardedErrorFeedback(t *testing.T) {
	const d, steps = 2, 5
	var params []optimizer.Param
	for i := range 4 {
		params = append(params, optimizer.Param{Name: fmt.Sprintf("w%d", i), Shape: []int{16, 32}})
	}
	run := func(sharded bool) [][]optimizer.PieceState {
		cfg := optimizer.Config{LR: optimizer.Constant(1e-2), Layout: shard.Options{BucketElements: 512}, ShardedGradients: sharded}
		comms := wrap(t, inproc.Communicators(d), fp8grad.Config{ErrorFeedback: true, Block: 32})
		out := make([][]optimizer.PieceState, d)
		err := onAll(comms, func(r int, c *fp8grad.Comm) error {
			ctx := context.Background()
			init := map[string][]float32{}
			for _, p := range params {
				init[p.Name] = make([]float32, 512)
			}
			o, err := optimizer.New(ctx, c, cpu.New(1), params, optimizer.FromMap(init), cfg)
			if err != nil {
				return err
			}
			defer o.Close()
			if n := len(o.Layout().Buckets); n != len(params) {
				return fmt.Errorf("%d buckets, want %d", n, len(params))
			}
			for step := range steps {
				for i := len(params) - 1; i >= 0; i-- {
					if err := o.SetGrad(params[i].Name, shardedGrad(step, r, i)); err != nil {
						return err
					}
					if err := o.GradReady(params[i].Name); err != nil {
						return err
					}
				}
				if _, err := o.Step(ctx); err != nil {
					return err
				}
			}
			out[r], err = o.ReadPieces()
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	full, pooled := run(false), run(true)
	for r := range d {
		if len(full[r]) != len(pooled[r]) {
			t.Fatalf("rank %d: %d pieces unsharded, %d sharded", r, len(full[r]), len(pooled[r]))
		}
		for k, a := range full[r] {
			b := pooled[r][k]
			for _, v := range []struct {
				what string
				x, y []float32
			}{{"master", a.Master, b.Master}, {"m", a.M, b.M}, {"v", a.V, b.V}} {
				for i := range v.x {
					if math.Float32bits(v.x[i]) != math.Float32bits(v.y[i]) {
						t.Fatalf("rank %d %s[%d] %s: %v unsharded, %v sharded", r, a.Param, a.Offset+i, v.what, v.x[i], v.y[i])
					}
				}
			}
		}
	}
}

// shardedGrad is rank r's gradient of parameter i at step: normal values
// whose scale differs per parameter, so that residuals of different
// buckets differ.
func shardedGrad(step, r, i int) []float32 {
	rng := rand.New(rand.NewPCG(uint64(step*16+r), uint64(i)))
	g := make([]float32, 512)
	for j := range g {
		g[j] = float32(rng.NormFloat64() * math.Ldexp(1, 2*i-10))
	}
	return g
}

// TestTagSizeMismatch: one tag used for reduce-scatters of two sizes is
// refused with collective.ErrInvalid (the residual belongs to one
// reduction).
func TestTagSizeMismatch(t *testing.T) {
	comms := wrap(t, inproc.Communicators(1), fp8grad.Config{ErrorFeedback: true})
	c := comms[0]
	rs := func(n int) error {
		src := make(buffer.HostBuffer, 4*n)
		op := collective.Op{Kind: collective.OpReduceScatter, Src: src, Dst: src, DType: buffer.Float32, Reduce: collective.Sum, Tag: 7}
		return c.Start(op).Wait(context.Background())
	}
	if err := rs(64); err != nil {
		t.Fatal(err)
	}
	if err := rs(64); err != nil {
		t.Fatal(err)
	}
	if err := rs(32); !errors.Is(err, collective.ErrInvalid) {
		t.Fatalf("tag 7 with 32 elements after 64: %v, want ErrInvalid", err)
	}
}
