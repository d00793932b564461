package optimizer_test

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/optimizertest"
)

// TestWeightsInto checks WeightsInto against Weights (bit for bit) and
// WeightsIntoTransposed against a transpose of Weights, for every recipe and
// the awkward shapes (blocks that cross rows, partial tiles, a scalar),
// after a few steps so that scales differ between blocks; dst's guard bands
// must stay untouched.
func TestWeightsInto(t *testing.T) {
	params := optimizertest.AwkwardParams()
	for name, cfg := range optimizertest.Configs() {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			o, err := optimizer.New(ctx, inproc.Communicators(1)[0], cpu.New(1), params, optimizer.FromMap(optimizertest.InitWeights(params, 1)), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer o.Close()
			for s := range 3 {
				for _, p := range params {
					if err := o.SetGrad(p.Name, optimizertest.Grad(p, 7, s)); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := o.Step(ctx); err != nil {
					t.Fatal(err)
				}
			}
			for _, p := range params {
				want, err := o.Weights(p.Name)
				if err != nil {
					t.Fatal(err)
				}
				rows, cols := fp8.Matrix(p.Shape)
				wantT := make([]float32, len(want))
				for r := range rows {
					for c := range cols {
						wantT[c*rows+r] = want[r*cols+c]
					}
				}
				for _, tc := range []struct {
					how  string
					into func([]float32, string) error
					want []float32
				}{{"WeightsInto", o.WeightsInto, want}, {"WeightsIntoTransposed", o.WeightsIntoTransposed, wantT}} {
					guarded := make([]float32, len(want)+2)
					guarded[0], guarded[len(guarded)-1] = 7, 7
					if err := tc.into(guarded[1:len(want)+1], p.Name); err != nil {
						t.Fatal(err)
					}
					if guarded[0] != 7 || guarded[len(guarded)-1] != 7 {
						t.Fatalf("%s %s wrote past its destination", tc.how, p.Name)
					}
					for k, x := range guarded[1 : len(want)+1] {
						if math.Float32bits(x) != math.Float32bits(tc.want[k]) {
							t.Fatalf("%s %s[%d] = %v, want %v", tc.how, p.Name, k, x, tc.want[k])
						}
					}
				}
			}
		})
	}
}

// TestWeightsIntoErrors checks that a destination of the wrong length and an
// unknown name are refused with their errors.
func TestWeightsIntoErrors(t *testing.T) {
	params := []optimizer.Param{{Name: "w", Shape: []int{3, 4}}}
	o, err := optimizer.New(context.Background(), inproc.Communicators(1)[0], cpu.New(1), params, optimizer.FromMap(optimizertest.InitWeights(params, 1)), optimizer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if err := o.WeightsInto(make([]float32, 11), "w"); !errors.Is(err, optimizer.ErrConfig) {
		t.Errorf("short destination: %v, want ErrConfig", err)
	}
	if err := o.WeightsIntoTransposed(make([]float32, 12), "v"); !errors.Is(err, optimizer.ErrUnknownParam) {
		t.Errorf("unknown name: %v, want ErrUnknownParam", err)
	}
}
