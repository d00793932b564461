package plan

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/distopt/distopt/fp8"
)

// near reports whether a and b differ by at most 1 ns per 10^6 (rounding
// of the conversions to Duration).
func near(a, b time.Duration) bool {
	return math.Abs(float64(a-b)) <= 2+1e-6*math.Abs(float64(b))
}

// The collectives against their closed forms, written out here.
func TestCollectiveClosedForms(t *testing.T) {
	l := Link{BusBW: 100e9, Alpha: 7 * time.Microsecond}
	const n = 3e9 // bytes
	for _, tc := range []struct {
		name      string
		got, want time.Duration
	}{
		{"ring step p=1", RingStep(l, 1, n), 0},
		{"ring step p=4", RingStep(l, 4, n), 21*time.Microsecond + 22500*time.Microsecond},         // 3 alpha + 3/4 n/B
		{"ring all-reduce p=4", RingAllReduce(l, 4, n), 42*time.Microsecond + 45*time.Millisecond}, // twice
		{"tree all-reduce p=8", TreeAllReduce(l, 8, n), 42*time.Microsecond + 52500*time.Microsecond},
		{"tree all-reduce p=5", TreeAllReduce(l, 5, n), 42*time.Microsecond + 48*time.Millisecond}, // ceil(log2 5) = 3
		{"all-reduce picks the tree at p=64", AllReduce(l, 64, 1), TreeAllReduce(l, 64, 1)},
	} {
		if !near(tc.got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, tc.got, tc.want)
		}
	}
}

// unitMachine has round numbers and no fixed costs, so that the phases
// are the alpha-beta and bandwidth terms alone.
var unitMachine = Machine{
	Name: "unit", GPUsPerNode: 4,
	Intra:    Link{BusBW: 200e9, Alpha: time.Microsecond},
	Inter:    Link{BusBW: 20e9, Alpha: 10 * time.Microsecond},
	UpdateBW: 1e12, NormBW: 500e9,
}

// PredictStep against closed forms: flat inside a node, flat across
// nodes, hierarchical (groups of a node), and the exposed time.
func TestPredictStepClosedForms(t *testing.T) {
	s := StepShape{Params: 1 << 30, Buckets: 4, GradBytes: 2, HPBytes: 2, UpdateBytes: 27, CastBytes: 5, AmaxBytes: 4096}
	n := float64(s.Params)
	sec := func(x float64) time.Duration { return time.Duration(math.Round(x * 1e9)) }
	for _, tc := range []struct {
		d, g   int
		rs, ag time.Duration
	}{
		// 4 ranks of one node: (p-1) alpha + (p-1)/p bytes / B.
		{4, 4, 3*time.Microsecond + sec(0.75*2*n/200e9), 3*time.Microsecond + sec(0.75*n/200e9)},
		// 16 ranks over 4 nodes, flat: the network carries every ring.
		{16, 16, 150*time.Microsecond + sec(15.0/16*2*n/20e9), 150*time.Microsecond + sec(15.0/16*n/20e9)},
		// 16 ranks in groups of 4: the group's ring inside the node, then
		// an all-reduce of the shard (2n/4 bytes) over 4 groups across
		// nodes (tree: 2 log2 4 alpha + 2 (3/4) bytes / B); the gather
		// stays in the node.
		{16, 4, 3*time.Microsecond + sec(0.75*2*n/200e9) + 40*time.Microsecond + sec(1.5*(2*n/4)/20e9), 3*time.Microsecond + sec(0.75*n/200e9)},
	} {
		t.Run(fmt.Sprintf("d=%d g=%d", tc.d, tc.g), func(t *testing.T) {
			p, err := PredictStep(unitMachine, s, tc.d, tc.g)
			if err != nil {
				t.Fatal(err)
			}
			shard := n / float64(tc.g)
			if !near(p.ReduceScatter, tc.rs) || !near(p.AllGather, tc.ag) {
				t.Errorf("reduce-scatter %v all-gather %v, want %v %v", p.ReduceScatter, p.AllGather, tc.rs, tc.ag)
			}
			if w := sec(shard * 27 / 1e12); !near(p.Update, w) {
				t.Errorf("update %v, want %v", p.Update, w)
			}
			if w := sec(shard * 5 / 1e12); !near(p.Cast, w) {
				t.Errorf("cast %v, want %v", p.Cast, w)
			}
			fixed := p.Norm + p.Update + p.AmaxReduce + p.Cast
			if got := p.Exposed(time.Hour); got != fixed {
				t.Errorf("exposed behind an hour of compute %v, want the phases that cannot overlap %v", got, fixed)
			}
			if got := p.Exposed(0); got != p.Total() {
				t.Errorf("exposed without compute %v, want the whole step %v", got, p.Total())
			}
			c := 3 * p.AllGather // hides the gather (a third), not all the reduce-scatter
			if want := fixed + max(0, p.ReduceScatter-2*c/3); p.Exposed(c) != want {
				t.Errorf("exposed at %v of compute %v, want %v", c, p.Exposed(c), want)
			}
		})
	}
	if _, err := PredictStep(unitMachine, s, 12, 8); err == nil {
		t.Error("12 ranks in groups of 8: no error")
	}
}

// The calibrated model against every measured phase: within 15%. Fitted
// points show that the fit holds; the others (collectives in both
// regimes, the amax all-reduce at d = 2) are predictions.
func TestCalibration(t *testing.T) {
	s := ShapeOf(GPT13B.Params(), 22, fp8.TensorCurrent)
	if s.Params != 1418842112 || s.HighPrecision != 643072 {
		t.Fatalf("shape %+v, want the 1.42B GPT of the measurements", s)
	}
	for _, m := range Measurements {
		p, err := PredictStep(Regime(m.Regime), s, m.D, m.D)
		if err != nil {
			t.Fatal(err)
		}
		got, err := p.Phase(m.Phase)
		if err != nil {
			t.Fatal(err)
		}
		ratio := got.Seconds() / m.Time.Seconds()
		t.Logf("%-45s d=%d %-15s predicted %8.3f ms measured %8.3f ms (%+.1f%%) fitted=%v", m.Regime.Name, m.D, m.Phase, got.Seconds()*1e3, m.Time.Seconds()*1e3, 100*(ratio-1), m.Fitted)
		if math.Abs(ratio-1) > 0.15 {
			t.Errorf("%s d=%d %s: predicted %v, measured %v", m.Regime.Name, m.D, m.Phase, got, m.Time)
		}
	}
}
