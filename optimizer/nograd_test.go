package optimizer_test

import (
	"context"
	"sync"
	"testing"

	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/distopt/distopt/collective/inproc"
)

// twoSteps runs two ranks through two steps: both write gradients g1 in
// the first, then second(o, rank) acts before the second step. It returns
// every rank's weights of each parameter after the second step.
func twoSteps(t *testing.T, second func(o *optimizer.Optimizer, r int) error) [2]map[string][]float32 {
	t.Helper()
	params := []optimizer.Param{{Name: "w", Shape: []int{4, 8}}, {Name: "b", Shape: []int{8}, HighPrecision: true}}
	init := map[string][]float32{"w": make([]float32, 32), "b": make([]float32, 8)}
	for i := range init["w"] {
		init["w"][i] = float32(i%7) / 8
	}
	comms := inproc.Communicators(2)
	var out [2]map[string][]float32
	var errs [2]error
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() {
			errs[r] = func() error {
				ctx := context.Background()
				o, err := optimizer.New(ctx, comms[r], cpu.New(1), params, optimizer.FromMap(init), optimizer.Config{LR: optimizer.Constant(0.01)})
				if err != nil {
					return err
				}
				defer o.Close()
				for _, p := range params {
					if err := o.SetGrad(p.Name, gradOf(p.Name, r, 1)); err != nil {
						return err
					}
				}
				if _, err := o.Step(ctx); err != nil {
					return err
				}
				if err := second(o, r); err != nil {
					return err
				}
				if _, err := o.Step(ctx); err != nil {
					return err
				}
				out[r] = map[string][]float32{}
				for _, p := range params {
					if out[r][p.Name], err = o.Weights(p.Name); err != nil {
						return err
					}
				}
				return nil
			}()
		})
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	return out
}

// gradOf is a gradient of the named parameter, different per rank and step.
func gradOf(name string, rank, step int) []float32 {
	n := 32
	if name == "b" {
		n = 8
	}
	g := make([]float32, n)
	for i := range g {
		g[i] = float32((i+3*rank+5*step)%11-5) / 4
	}
	return g
}

// A rank that writes no gradient before a step contributes zeros, exactly
// as if it had called ZeroGrad: not the values the last reduce-scatter
// left in its buffers. Writing its first gradient again gives other
// weights, so the rank's contribution is seen.
func TestStepWithoutGradient(t *testing.T) {
	write := func(o *optimizer.Optimizer, r int) error {
		if r == 0 {
			return nil
		}
		for _, name := range []string{"w", "b"} {
			if err := o.SetGrad(name, gradOf(name, r, 2)); err != nil {
				return err
			}
		}
		return nil
	}
	none := twoSteps(t, write)
	zeroed := twoSteps(t, func(o *optimizer.Optimizer, r int) error {
		if r == 0 {
			if err := o.ZeroGrad(); err != nil {
				return err
			}
		}
		return write(o, r)
	})
	again := twoSteps(t, func(o *optimizer.Optimizer, r int) error {
		if r == 0 {
			for _, name := range []string{"w", "b"} {
				if err := o.SetGrad(name, gradOf(name, r, 1)); err != nil {
					return err
				}
			}
		}
		return write(o, r)
	})
	for r := range 2 {
		for _, name := range []string{"w", "b"} {
			assert.Equal(t, zeroed[r][name], none[r][name], "rank %d, %s: no gradient written is not a zero gradient", r, name)
			assert.NotEqual(t, again[r][name], none[r][name], "rank %d, %s: rank 0's gradient makes no difference", r, name)
		}
	}
}
