package kernels

import (
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"

	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/cuda/cudatest"
	"github.com/distopt/distopt/optimizer/backend"
)

type stats = [backend.StatsLen]int64

// gradBytes returns xs as the bytes of a float32 or bfloat16 gradient.
func gradBytes(xs []float32, bf bool) []byte {
	if !bf {
		return cuda.Bytes(xs)
	}
	h := make([]uint16, len(xs))
	parallelFor(len(xs), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			h[i] = fp8.BF16FromFloat32(xs[i])
		}
	})
	return cuda.Bytes(h)
}

// parallelRef is refStats over xs split across the CPUs (each piece
// normalised, then the pieces added), as the CPU backend computes it.
func parallelRef(xs []float32) stats {
	p := runtime.GOMAXPROCS(0)
	parts := make([]stats, p)
	var wg sync.WaitGroup
	for k := range p {
		wg.Go(func() { parts[k] = refStats(xs[len(xs)*k/p : len(xs)*(k+1)/p]) })
	}
	wg.Wait()
	var s stats
	for _, q := range parts {
		s = addStats(s, q)
	}
	return s
}

// gsRig is a device gradient buffer and statistics buffer for one Set.
type gsRig struct {
	k     *Set
	s     *cuda.Stream
	grad  cuda.DevicePtr
	stats cuda.DevicePtr
}

func newGSRig(t testing.TB, d *cuda.Device, k *Set, gradBytes int) *gsRig {
	return &gsRig{k: k, s: cudatest.Stream(t, d), grad: cudatest.Alloc(t, d, gradBytes+64), stats: cudatest.Alloc(t, d, 8*backend.StatsLen)}
}

// run uploads xs at element offset off, sets the statistics to init, runs
// launch (GradStats unless given) and returns the statistics.
func (r *gsRig) run(t testing.TB, xs []float32, bf bool, off int, init stats, launch func(st, g cuda.DevicePtr, n int) error) stats {
	t.Helper()
	size := 4
	if bf {
		size = 2
	}
	g := r.grad.Add(off * size)
	must(t, r.s.Upload(g, gradBytes(xs, bf)))
	must(t, r.s.Upload(r.stats, cuda.Bytes(init[:])))
	if launch == nil {
		launch = func(st, g cuda.DevicePtr, n int) error { return r.k.GradStats(r.s, st, g, n, bf) }
	}
	must(t, launch(r.stats, g, len(xs)))
	var got stats
	must(t, r.s.Download(cuda.Bytes(got[:]), r.stats))
	return got
}

// rerun is run on the gradient the last run uploaded (xs only gives its
// length).
func (r *gsRig) rerun(t testing.TB, xs []float32, bf bool, off int, init stats, launch func(st, g cuda.DevicePtr, n int) error) stats {
	t.Helper()
	size := 4
	if bf {
		size = 2
	}
	must(t, r.s.Upload(r.stats, cuda.Bytes(init[:])))
	must(t, launch(r.stats, r.grad.Add(off*size), len(xs)))
	var got stats
	must(t, r.s.Download(cuda.Bytes(got[:]), r.stats))
	return got
}

// loadGradStats is loadAll with the gradstats module alone (the tests and
// benchmarks of this file need no other: less to load).
func loadGradStats(t testing.TB) (*cuda.Device, []*Set) {
	t.Helper()
	d := cudatest.Require(t)
	return d, loadVariants(t, d, func(v Variant) (*Set, error) { return load(d, v, []string{"gradstats"}) })
}

// randomInit returns normalised statistics to start from (the launchers
// add to what stats holds).
func randomInit(r *rand.Rand) stats {
	var s stats
	for k := range backend.NormLimbs - 1 {
		s[k] = int64(r.Uint32())
	}
	s[backend.NormLimbs-1] = int64(r.IntN(1000))
	s[backend.NormLimbs] = int64(r.IntN(10))
	return s
}

// with launches the kernels of configuration c, then the normalisation.
func (r *gsRig) with(c gsConfig, bf bool) func(st, g cuda.DevicePtr, n int) error {
	return func(st, g cuda.DevicePtr, n int) error { return r.k.gradStatsWith(c, r.s, st, g, n, bf) }
}

// TestGradStatsRandom compares GradStats in every configuration (and the
// first kernel) with the CPU reference on every kind of gradient of
// gradKinds, for sizes around the vector widths and element offsets that
// leave the slice unaligned, added to nonzero statistics.
func TestGradStatsRandom(t *testing.T) {
	d, sets := loadGradStats(t)
	sizes := []int{1, 3, 7, 8, 9, 31, 33, 1000, 4097, 1<<20 + 3}
	for _, k := range sets {
		rig := newGSRig(t, d, k, 4*sizes[len(sizes)-1])
		for _, bf := range []bool{false, true} {
			for _, kind := range gradKinds {
				r := rand.New(rand.NewPCG(3, uint64(len(kind.name))))
				for _, n := range sizes {
					xs := kind.gen(r, n, bf)
					sum := refStats(xs)
					for _, off := range []int{0, 1, 3, 5} {
						init := randomInit(r)
						want := addStats(init, sum)
						for _, c := range gradStatsConfigs {
							if got := rig.run(t, xs, bf, off, init, rig.with(c, bf)); got != want {
								t.Errorf("%v%s bf16=%v %s n=%d offset %d: gpu %v, cpu %v", k.v, c.suffix, bf, kind.name, n, off, got, want)
							}
						}
						if off == 1 {
							if got := rig.run(t, xs, bf, off, init, rig.v1(bf)); got != want {
								t.Errorf("%v bf16=%v %s n=%d: first kernel %v, cpu %v", k.v, bf, kind.name, n, got, want)
							}
						}
					}
				}
			}
		}
	}
}

// v1 launches the first kernel as its launcher did (1-D grid, 8 blocks per
// multiprocessor at most), then the normalisation.
func (r *gsRig) v1(bf bool) func(st, g cuda.DevicePtr, n int) error {
	return func(st, g cuda.DevicePtr, n int) error {
		if err := r.k.launch1D(r.s, "grad_stats_v1_"+typeName(bf), n, 4, new(cuda.Args).Ptr(st).Ptr(g).U64(uint64(n))); err != nil {
			return err
		}
		return r.k.gradStatsNormalize(r.s, st)
	}
}

// grid launches the kernel on a given grid: the sum must not depend on it,
// and small grids make each thread run many flush periods.
func (r *gsRig) grid(c gsConfig, bf bool, blocks uint32) func(st, g cuda.DevicePtr, n int) error {
	return func(st, g cuda.DevicePtr, n int) error {
		args := new(cuda.Args).Ptr(st).Ptr(g).U64(uint64(n))
		if err := r.s.Launch(r.k.function("grad_stats_"+typeName(bf)+c.suffix), cuda.Dim3{X: blocks}, cuda.Dim3{X: gradStatsBlock}, 0, args); err != nil {
			return err
		}
		return r.k.gradStatsNormalize(r.s, st)
	}
}

// TestGradStatsGrids runs the kernels (every configuration) on grids of 1,
// 3 and 37 blocks over
// 2^22+5 elements (each thread of one block passes 64 flush periods or
// more) of the typical, scaled and adversarial kinds.
func TestGradStatsGrids(t *testing.T) {
	d, sets := loadGradStats(t)
	const n = 1<<22 + 5
	for _, k := range sets {
		rig := newGSRig(t, d, k, 4*n)
		for _, bf := range []bool{false, true} {
			for _, kind := range gradKinds[:6] {
				xs := kind.gen(rand.New(rand.NewPCG(5, uint64(len(kind.name)))), n, bf)
				want := parallelRef(xs)
				for _, c := range gradStatsConfigs {
					for _, blocks := range []uint32{1, 3, 37} {
						if got := rig.run(t, xs, bf, 3, stats{}, rig.grid(c, bf, blocks)); got != want {
							t.Errorf("%v%s bf16=%v %s %d blocks: gpu %v, cpu %v", k.v, c.suffix, bf, kind.name, blocks, got, want)
						}
					}
				}
			}
		}
	}
}

// TestGradStatsBF16Exhaustive checks every bfloat16 value: all 2^16 summed
// in one call (at every offset modulo the vector), each alone at its own
// (unaligned) address, and each repeated over four aligned vectors (the
// fast path and a flush of each square).
func TestGradStatsBF16Exhaustive(t *testing.T) {
	d, sets := loadGradStats(t)
	all := make([]float32, 1<<16)
	rep := make([]float32, 0, 32<<16)
	for h := range all {
		all[h] = fp8.Float32FromBF16(uint16(h))
		for range 32 {
			rep = append(rep, all[h])
		}
	}
	for _, k := range sets {
		rig := newGSRig(t, d, k, 2*len(rep))
		want := refStats(all)
		for _, c := range gradStatsConfigs {
			for off := range 8 {
				if got := rig.run(t, all, true, off, stats{}, rig.with(c, true)); got != want {
					t.Errorf("%v%s all bfloat16 at offset %d: gpu %v, cpu %v", k.v, c.suffix, off, got, want)
				}
			}
			t.Run(k.v.String()+c.suffix+"/alone", func(t *testing.T) { eachBF16(t, d, rig, c, all, 1) })
			t.Run(k.v.String()+c.suffix+"/repeated", func(t *testing.T) { eachBF16(t, d, rig, c, rep, 32) })
		}
	}
}

// eachBF16 uploads xs (2^16 runs of per values, run h all bfloat16 h) and
// computes the statistics of each run by its own call of configuration c
// into its own statistics, all queued before one download.
func eachBF16(t *testing.T, d *cuda.Device, rig *gsRig, c gsConfig, xs []float32, per int) {
	const runs = 1 << 16
	must(t, rig.s.Upload(rig.grad, gradBytes(xs, true)))
	out := cudatest.Alloc(t, d, 8*backend.StatsLen*runs)
	must(t, rig.s.Memset8(out, 0, 8*backend.StatsLen*runs))
	for h := range runs {
		must(t, rig.k.gradStatsWith(c, rig.s, out.Add(8*backend.StatsLen*h), rig.grad.Add(2*per*h), per, true))
	}
	got := make([]int64, backend.StatsLen*runs)
	must(t, rig.s.Download(cuda.Bytes(got), out))
	bad := 0
	for h := range runs {
		want := refStats(xs[per*h : per*(h+1)])
		if g := stats(got[backend.StatsLen*h:]); g != want {
			if bad++; bad <= 8 {
				t.Errorf("bfloat16 %#04x x%d: gpu %v, cpu %v", h, per, g, want)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d bfloat16 values wrong", bad, runs)
	}
}

// TestGradStatsHuge checks 2^28+3 bfloat16 and 2^28+1 float32 gradients
// (typical, over 16 tensors of growing scale; and the adversarial
// alternation) at odd element offsets against the CPU reference, in every
// configuration.
func TestGradStatsHuge(t *testing.T) {
	if testing.Short() {
		t.Skip("huge gradients: not in -short")
	}
	d, sets := loadGradStats(t)
	k := sets[len(sets)-1]
	rig := newGSRig(t, d, k, 4*(1<<28+1))
	for _, c := range []struct {
		bf   bool
		n    int
		kind string
	}{{true, 1<<28 + 3, "scaledup"}, {true, 1<<28 + 3, "alternate"}, {false, 1<<28 + 1, "scaledup"}} {
		xs := hugeGrad(c.n, c.bf, c.kind)
		want := parallelRef(xs)
		for i, cfg := range gradStatsConfigs {
			run := rig.run
			if i > 0 {
				run = rig.rerun
			}
			if got := run(t, xs, c.bf, 1, stats{}, rig.with(cfg, c.bf)); got != want {
				t.Errorf("%v%s bf16=%v %s n=%d: gpu %v, cpu %v", k.v, cfg.suffix, c.bf, c.kind, c.n, got, want)
			}
		}
	}
}

// hugeGrad generates n values in parallel: kind "scaledup" is 16 tensors
// of Gaussian values, each 8 times the one before (from sigma 1e-3), any
// other kind is that of gradKinds.
func hugeGrad(n int, bf bool, kind string) []float32 {
	gen := gradKinds[0].gen // normal
	for _, g := range gradKinds {
		if g.name == kind && kind != "scaledup" {
			gen = g.gen
		}
	}
	xs := make([]float32, n)
	const piece = 1 << 20
	parallelFor((n+piece-1)/piece, func(lo, hi int) {
		for p := lo; p < hi; p++ {
			part := gen(rand.New(rand.NewPCG(11, uint64(p))), min(piece, n-p*piece), bf)
			if kind == "scaledup" {
				for j := range part { // a power of two: exact in bfloat16 too
					part[j] = float32(math.Ldexp(float64(part[j]), 3*(16*(p*piece+j)/n)))
				}
			}
			copy(xs[p*piece:], part)
		}
	})
	return xs
}

// TestGradStatsTable checks GradStatsTable in every configuration against
// the CPU reference of the concatenated segments: segments of random sizes
// (zero, a few elements, around the vector widths, up to 2^18) at random
// element offsets of one buffer, each of its own kind of gradient, for 1,
// 3 and 24 segments; and the refusal of misaligned and negative segments.
func TestGradStatsTable(t *testing.T) {
	d, sets := loadGradStats(t)
	sizes := []int{0, 1, 5, 8, 9, 17, 1000, 4099, 1 << 18}
	for _, k := range sets {
		rig := newGSRig(t, d, k, 4*24*(1<<18+16))
		for _, bf := range []bool{false, true} {
			size := 4
			if bf {
				size = 2
			}
			r := rand.New(rand.NewPCG(13, 0))
			for _, nseg := range []int{1, 3, 24} {
				var all []float32
				var segs []GradSegment
				var raw []byte
				for i := range nseg {
					gap := r.IntN(8)
					raw = append(raw, make([]byte, gap*size)...)
					n := sizes[r.IntN(len(sizes))]
					if i == 0 && nseg == 1 {
						n = 1<<18 + 3
					}
					xs := gradKinds[r.IntN(len(gradKinds))].gen(r, n, bf)
					segs = append(segs, GradSegment{Ptr: rig.grad.Add(len(raw)), N: n})
					raw = append(raw, gradBytes(xs, bf)...)
					all = append(all, xs...)
				}
				must(t, rig.s.Upload(rig.grad, raw))
				init := randomInit(r)
				want := addStats(init, refStats(all))
				for _, c := range gradStatsConfigs {
					tab, err := k.newGradStatsTable(c, rig.s, segs, bf)
					must(t, err)
					must(t, rig.s.Upload(rig.stats, cuda.Bytes(init[:])))
					must(t, tab.Launch(rig.s, rig.stats))
					var got stats
					must(t, rig.s.Download(cuda.Bytes(got[:]), rig.stats))
					must(t, tab.Free())
					if got != want {
						t.Errorf("%v%s bf16=%v %d segments: gpu %v, cpu %v", k.v, c.suffix, bf, nseg, got, want)
					}
				}
			}
			if _, err := k.NewGradStatsTable(rig.s, []GradSegment{{Ptr: rig.grad, N: 4}, {Ptr: rig.grad.Add(1), N: 3}}, bf); err == nil {
				t.Errorf("bf16=%v: a segment at an odd address was accepted", bf)
			}
			if _, err := k.NewGradStatsTable(rig.s, []GradSegment{{Ptr: rig.grad, N: -1}}, bf); err == nil {
				t.Errorf("bf16=%v: a segment of -1 elements was accepted", bf)
			}
		}
	}
}
