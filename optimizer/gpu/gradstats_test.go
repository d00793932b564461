package gpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/bf16"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/optimizer/backend"
)

var _ backend.GradStatsPlanner = (*Backend)(nil)

// TestPlanGradStats plans the statistics of 22 gradient buffers of the CPU
// backend's kinds (sizes from 0 to 70000, slices at odd element offsets,
// values of every exponent, Inf and NaN) on the GPU backend and runs the
// plan twice into statistics that start nonzero: each run must give the
// bits of the CPU backend's GradStats over every buffer in turn. Counts
// that do not match the buffers are refused.
func TestPlanGradStats(t *testing.T) {
	b := open(t)
	cpu := cpu.New(2)
	for _, gt := range []buffer.DType{buffer.BFloat16, buffer.Float32} {
		r := rand.New(rand.NewPCG(17, uint64(gt)))
		var grads, cgrads []buffer.Buffer
		var ns []int
		for i := range 22 {
			n := []int{0, 1, 7, 9, 1000, 70000}[r.IntN(6)]
			off := r.IntN(5)
			xs := make([]float32, n+off)
			for j := range xs {
				switch {
				case i%3 == 0:
					xs[j] = math.Float32frombits(r.Uint32())
				default:
					xs[j] = float32(r.NormFloat64() * math.Ldexp(1, i-20))
				}
			}
			raw := []byte(collective.ToBytes(xs))
			if gt == buffer.BFloat16 {
				h := make([]uint16, len(xs))
				for j, x := range xs {
					h[j] = bf16.FromFloat32(x)
				}
				raw = collective.ToBytes(h)
			}
			g, err := b.Alloc(len(raw))
			must(t, err)
			t.Cleanup(func() { b.Free(g) })
			must(t, b.Write(g, 0, raw))
			sz := gt.Size()
			grads = append(grads, g.Slice(sz*off, sz*(off+n)))
			cgrads = append(cgrads, buffer.HostBuffer(raw[sz*off:sz*(off+n)]))
			ns = append(ns, n)
		}
		init := make([]int64, backend.StatsLen)
		init[0], init[3], init[backend.StatsLen-1] = 5, 7, 2
		stats, err := b.Alloc(8 * backend.StatsLen)
		must(t, err)
		defer b.Free(stats)
		must(t, b.Write(stats, 0, collective.ToBytes(init)))
		want := buffer.HostBuffer(collective.ToBytes(init))
		plan, err := b.PlanGradStats(stats, grads, gt, ns)
		must(t, err)
		for run := range 2 {
			must(t, plan.Run())
			for i, g := range cgrads {
				must(t, cpu.GradStats(want, g, gt, ns[i]))
			}
			got := make([]byte, 8*backend.StatsLen)
			must(t, b.Read(got, stats, 0))
			if string(got) != string(want) {
				t.Errorf("%v run %d: gpu %v, cpu %v", gt, run, collective.FromBytes[int64](got), collective.FromBytes[int64](want))
			}
		}
		must(t, plan.Close())
		if _, err := b.PlanGradStats(stats, grads, gt, ns[1:]); err == nil {
			t.Errorf("%v: %d buffers with %d counts accepted", gt, len(grads), len(ns)-1)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
