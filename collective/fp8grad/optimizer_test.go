package fp8grad_test

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/fp8grad"
	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/optimizer"
)

// TestOptimizerSkipsNonFinite: with FP8 gradient communication, a NaN or
// an infinity in one rank's gradient makes the step skip on every rank
// (the owner of the poisoned shard sees a NaN, the norm all-reduce tells
// the others); a finite step afterwards is taken everywhere.
func TestOptimizerSkipsNonFinite(t *testing.T) {
	const d = 3
	params := []optimizer.Param{{Name: "w", Shape: []int{40, 25}}, {Name: "b", Shape: []int{7}, HighPrecision: true}}
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1))} {
		comms := wrap(t, inproc.Communicators(d), fp8grad.Config{})
		err := onAll(comms, func(r int, c *fp8grad.Comm) error {
			ctx := context.Background()
			o, err := optimizer.New(ctx, c, cpu.New(1), params, optimizer.FromMap(map[string][]float32{"w": make([]float32, 1000), "b": make([]float32, 7)}), optimizer.Config{LR: optimizer.Constant(1e-2)})
			if err != nil {
				return err
			}
			defer o.Close()
			for step, poison := range []bool{true, false} {
				g := make([]float32, 1000)
				for i := range g {
					g[i] = float32(i%17-8) * 1e-3 * float32(r+1)
				}
				if poison && r == 1 {
					g[999] = bad // in the last rank's shard
				}
				if err := o.SetGrad("w", g); err != nil {
					return err
				}
				if err := o.SetGrad("b", make([]float32, 7)); err != nil {
					return err
				}
				res, err := o.Step(ctx)
				if err != nil {
					return err
				}
				if res.Skipped != poison {
					return fmt.Errorf("rank %d step %d (%g injected: %t): skipped %t (%s)", r, step, bad, poison, res.Skipped, res.Reason)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

var _ collective.Communicator = (*fp8grad.Comm)(nil)
