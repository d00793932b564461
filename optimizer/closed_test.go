package optimizer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/distopt/distopt/optimizer"

	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/optimizer/cpu"
	"github.com/distopt/distopt/optimizer/optimizertest"
)

// TestAfterClose calls every method of a closed optimizer, with and
// without sharded gradients: each one that returns an error returns
// ErrClosed (not ErrBroken: nothing failed), the others do not panic.
// Before, Grad and SetGrad panicked with an index out of range, and Step
// said "state broken by an earlier failure".
func TestAfterClose(t *testing.T) {
	params := []optimizer.Param{{Name: "w", Shape: []int{8, 8}}, {Name: "b", Shape: []int{8}, HighPrecision: true}}
	init := optimizertest.InitWeights(params, 1)
	ctx := context.Background()
	calls := []struct {
		name string
		call func(o *optimizer.Optimizer) error
	}{
		{"Grad", func(o *optimizer.Optimizer) error { _, err := o.Grad("w"); return err }},
		{"SetGrad", func(o *optimizer.Optimizer) error { return o.SetGrad("w", make([]float32, 64)) }},
		{"GradReady", func(o *optimizer.Optimizer) error { return o.GradReady("w") }},
		{"ZeroGrad", func(o *optimizer.Optimizer) error { return o.ZeroGrad() }},
		{"Step", func(o *optimizer.Optimizer) error { _, err := o.Step(ctx); return err }},
		{"StepAsync", func(o *optimizer.Optimizer) error { _, err := o.StepAsync(ctx); return err }},
		{"WaitParam", func(o *optimizer.Optimizer) error { return o.WaitParam(ctx, "w") }},
		{"WaitGathers", func(o *optimizer.Optimizer) error { return o.WaitGathers(ctx) }},
		{"Param", func(o *optimizer.Optimizer) error { _, err := o.Param("w"); return err }},
		{"Tensor", func(o *optimizer.Optimizer) error { _, err := o.Tensor("w"); return err }},
		{"Weights", func(o *optimizer.Optimizer) error { _, err := o.Weights("b"); return err }},
		{"WeightsInto", func(o *optimizer.Optimizer) error { return o.WeightsInto(make([]float32, 64), "w") }},
		{"WeightsIntoTransposed", func(o *optimizer.Optimizer) error { return o.WeightsIntoTransposed(make([]float32, 64), "w") }},
		{"ReadPieces", func(o *optimizer.Optimizer) error { _, err := o.ReadPieces(); return err }},
		{"LoadPieces", func(o *optimizer.Optimizer) error {
			return o.LoadPieces(ctx, func(string, int, []float32, []float32, []float32) error { return nil })
		}},
		{"MeanOverRanks", func(o *optimizer.Optimizer) error { _, err := o.MeanOverRanks(ctx, 1); return err }},
		{"Close again", func(o *optimizer.Optimizer) error { o.Close(); return optimizer.ErrClosed }},
		{"no error: StepCount, LossScale, Scalars, LastResult, Report", func(o *optimizer.Optimizer) error {
			o.StepCount()
			o.LossScale()
			o.Scalars()
			o.LastResult()
			o.Report()
			return optimizer.ErrClosed
		}},
	}
	for _, sharded := range []bool{false, true} {
		for _, c := range calls {
			t.Run(fmt.Sprintf("sharded %t/%s", sharded, c.name), func(t *testing.T) {
				cfg := optimizer.Config{ShardedGradients: sharded, LossScaler: &optimizer.LossScaler{}}
				o, err := optimizer.New(ctx, inproc.Communicators(1)[0], cpu.New(1), params, optimizer.FromMap(init), cfg)
				if err != nil {
					t.Fatal(err)
				}
				if err := o.Close(); err != nil {
					t.Fatal(err)
				}
				var got error
				func() {
					defer func() {
						if p := recover(); p != nil {
							got = fmt.Errorf("panic: %v", p)
						}
					}()
					got = c.call(o)
				}()
				if !errors.Is(got, optimizer.ErrClosed) || errors.Is(got, optimizer.ErrBroken) {
					t.Fatalf("after Close: %v, want ErrClosed and not ErrBroken", got)
				}
			})
		}
	}
}

// TestNewNilArguments: New with a nil communicator or backend returns
// ErrConfig naming what is missing. Before, both panicked.
func TestNewNilArguments(t *testing.T) {
	params := []optimizer.Param{{Name: "w", Shape: []int{8}}}
	init := optimizer.FromMap(optimizertest.InitWeights(params, 1))
	cases := []struct {
		name string
		new  func() (*optimizer.Optimizer, error)
		says string
	}{
		{"nil communicator", func() (*optimizer.Optimizer, error) {
			return optimizer.New(context.Background(), nil, cpu.New(1), params, init, optimizer.Config{})
		}, "needs a communicator"},
		{"nil backend", func() (*optimizer.Optimizer, error) {
			return optimizer.New(context.Background(), inproc.Communicators(1)[0], nil, params, init, optimizer.Config{})
		}, "needs a backend"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var err error
			func() {
				defer func() {
					if p := recover(); p != nil {
						err = fmt.Errorf("panic: %v", p)
					}
				}()
				_, err = c.new()
			}()
			if !errors.Is(err, optimizer.ErrConfig) || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("%v, want ErrConfig saying %q", err, c.says)
			}
		})
	}
}
