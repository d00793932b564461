package fp8grad_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/collective/fp8grad"
	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/optimizertest"
	"github.com/distopt/distopt/shard"
)

// poolSim replays a step on a model of the device Comm's staging pool
// (free buffers by size, a new one when none is free): every bucket's
// reduce-scatter takes a send and a receive buffer of d x PieceBytes
// bytes each, and once InFlight are in
// flight the oldest is waited for (its buffers freed) before the next
// starts. It returns the bytes ever allocated.
func poolSim(s fp8grad.Steps, block int) int64 {
	free := map[int]int{}
	var allocated int64
	var fifo []int
	k := s.InFlight
	for range max(1, s.Rounds) {
		for _, elems := range s.Buckets {
			if k > 0 && len(fifo) == k {
				free[fifo[0]] += 2
				fifo = fifo[1:]
			}
			n := s.Ranks * fp8grad.PieceBytes(elems/s.Ranks, block)
			for range 2 {
				if free[n] > 0 {
					free[n]--
				} else {
					allocated += int64(n)
				}
			}
			fifo = append(fifo, n)
		}
	}
	return allocated
}

// TestPredictStepsStaging checks PredictSteps's staging against the pool
// model for random sequences of bucket sizes (few distinct sizes, so that
// buffers are reused), ranks, buffers in flight and rounds.
func TestPredictStepsStaging(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 500 {
		d := []int{1, 2, 3, 4, 8}[rng.IntN(5)]
		sizes := []int{d * (1 + rng.IntN(300)), d * (1 + rng.IntN(300)), d * 128}
		s := fp8grad.Steps{Ranks: d, InFlight: rng.IntN(5), Rounds: rng.IntN(3)}
		for range 1 + rng.IntN(8) {
			s.Buckets = append(s.Buckets, sizes[rng.IntN(len(sizes))])
		}
		block := []int{32, 64, 128}[rng.IntN(3)]
		m, err := fp8grad.PredictSteps(s, fp8grad.Config{Block: block})
		if err != nil {
			t.Fatal(err)
		}
		if want := poolSim(s, block); m.Staging != want {
			t.Fatalf("case %d %+v, block %d: staging %d, pool model %d", i, s, block, m.Staging, want)
		}
		if m.Residual != 0 {
			t.Fatalf("case %d: residual %d without error feedback", i, m.Residual)
		}
	}
}

// TestPredictStepsResidual trains in-process ranks through a Comm for a
// few steps (buckets of different sizes, the last parameter's bucket
// smaller) and checks every rank's ResidualBytes against PredictSteps over
// the optimizer's layout: 4 bytes per element of every bucket, the whole
// bucket and not the shard, with and without sharded gradients; 0 without
// error feedback.
func TestPredictStepsResidual(t *testing.T) {
	params := []optimizer.Param{{Name: "a", Shape: []int{48, 32}}, {Name: "b", Shape: []int{24, 32}}, {Name: "c", Shape: []int{100}}}
	for _, d := range []int{1, 2, 4} {
		for _, sharded := range []bool{false, true} {
			for _, ef := range []bool{false, true} {
				t.Run(fmt.Sprintf("d=%d sharded=%v ef=%v", d, sharded, ef), func(t *testing.T) {
					fc := fp8grad.Config{Format: fp8.E5M2, Block: 64, ErrorFeedback: ef}
					cfg := optimizer.Config{LR: optimizer.Constant(1e-3), Layout: shard.Options{BucketElements: 1024}, ShardedGradients: sharded}
					got := residualAfterSteps(t, params, d, cfg, fc)
					l, err := optimizer.NewLayout(params, d, cfg.Layout)
					if err != nil {
						t.Fatal(err)
					}
					s := fp8grad.Steps{Ranks: d}
					for _, b := range l.Buckets {
						s.Buckets = append(s.Buckets, b.Size)
					}
					if len(s.Buckets) < 2 {
						t.Fatalf("%d buckets, want several", len(s.Buckets))
					}
					m, err := fp8grad.PredictSteps(s, fc)
					if err != nil {
						t.Fatal(err)
					}
					var elems int64
					for _, b := range s.Buckets {
						elems += int64(b)
					}
					if ef && m.Residual != 4*elems || !ef && m.Residual != 0 {
						t.Fatalf("PredictSteps residual %d for %d bucket elements", m.Residual, elems)
					}
					for r, b := range got {
						if int64(b) != m.Residual {
							t.Errorf("rank %d: ResidualBytes %d, PredictSteps %d", r, b, m.Residual)
						}
					}
				})
			}
		}
	}
}

// residualAfterSteps runs three steps of an optimizer over params on d
// in-process ranks wrapped by fc and returns every rank's ResidualBytes.
func residualAfterSteps(t *testing.T, params []optimizer.Param, d int, cfg optimizer.Config, fc fp8grad.Config) []int {
	comms := wrap(t, inproc.Communicators(d), fc)
	out := make([]int, d)
	err := onAll(comms, func(r int, c *fp8grad.Comm) error {
		_, err := optimizertest.TrainOverlapped(context.Background(), c, cpu.New(1), params, cfg, 3,
			optimizertest.RankGrad, optimizertest.Overlap{Sync: true})
		if err != nil {
			return err
		}
		out[r] = c.ResidualBytes()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
