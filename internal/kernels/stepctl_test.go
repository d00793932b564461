package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/cuda/cudatest"
	"github.com/distopt/distopt/optimizer/backend"
	"github.com/distopt/distopt/optimizer/backendtest"
)

// controlCases returns statistics for TestStepControl: every single bit of
// the limbs, ties and near-ties of the rounding to float64 at every
// position (53 bits, the round bit, with and without a sticky bit below),
// limbs past 32 bits as an all-reduce leaves them, non-finite counts, and
// zero.
func controlCases(r *rand.Rand) [][backend.StatsLen]int64 {
	var out [][backend.StatsLen]int64
	out = append(out, [backend.StatsLen]int64{})
	out = append(out, backendtest.BitsAndTies(r)...)
	for range 500 {
		var s [backend.StatsLen]int64
		for i := range backend.NormLimbs - 1 {
			s[i] = int64(r.Uint64() >> (20 + r.IntN(44)))
		}
		s[backend.NormLimbs-1] = int64(r.Uint64() >> (8 + r.IntN(56)))
		if r.IntN(5) == 0 {
			s[backend.NormLimbs] = int64(1 + r.IntN(9))
		}
		out = append(out, s)
	}
	return out
}

// TestStepControl runs the control kernel over controlCases from random
// blocks (clipping or not, a loss scaler or not) and compares every block
// with backend.Control.Advance, byte for byte.
func TestStepControl(t *testing.T) {
	d, sets := loadAll(t)
	s := cudatest.Stream(t, d)
	ctl := cudatest.Alloc(t, d, backend.ControlBytes)
	stats := cudatest.Alloc(t, d, 8*backend.StatsLen)
	for _, k := range sets {
		t.Run(fmt.Sprint(k.v), func(t *testing.T) {
			r := rand.New(rand.NewPCG(15, 6))
			bad := 0
			for i, st := range controlCases(r) {
				c := backend.Control{Scale: 1, Step: int64(r.IntN(100))}
				if r.IntN(2) == 0 {
					c.MaxNorm = math.Ldexp(r.Float64(), r.IntN(60)-20)
				}
				if r.IntN(2) == 0 {
					c.Growth, c.Backoff, c.MinScale, c.MaxScale, c.Interval = 2, 0.5, 1, 1<<24, int64(1+r.IntN(2))
					c.Scale, c.Good = math.Ldexp(1, r.IntN(25)), int64(r.IntN(2))
				}
				must(t, s.Upload(ctl, c.Encode()))
				must(t, s.Upload(stats, cuda.Bytes(st[:])))
				must(t, k.StepControl(s, ctl, stats))
				got := make([]byte, backend.ControlBytes)
				must(t, s.Download(got, ctl))
				c.Advance(&st)
				if want := c.Encode(); string(got) != string(want) {
					if bad++; bad <= 5 {
						g, _ := backend.DecodeControl(got)
						t.Errorf("case %d, limbs %x: %+v, want %+v", i, st, g, c)
					}
				}
			}
		})
	}
}
