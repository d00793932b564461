package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/cuda/cudatest"
	"github.com/distopt/distopt/fp8"
)

// delayedRecipes are the per-tensor recipes of delayed activation scaling:
// the scale comes from elsewhere, the format (and for GPTActScales the
// margin and power-of-2 rule) from the recipe.
var delayedRecipes = []fp8.Recipe{
	{Format: fp8.E4M3, Scaling: fp8.TensorCurrent},
	{Format: fp8.E5M2, Scaling: fp8.TensorCurrent, Margin: 1, PowerOf2: true},
}

// checkDelayed runs a delayed-scaling launch (run, on fresh inputs each
// time, writing dst and folding into amax) twice against v, the float32
// output the launch quantizes (from the unfused kernels): with the scale
// current scaling derives from v's amax, the codes and scale_inv must be
// quantizeHost's, bit for bit, and the amax, folded into a zero, v's; with
// a quarter of that scale (and four times it: values past the format's
// largest, which the cast saturates), the codes must be the fp8 package's
// cast with it, scale_inv four times (a quarter of) the first, and an
// amax larger than v's left as it was.
func (e *fusedEnv) checkDelayed(name string, v []float32, rows, n int, r fp8.Recipe, run func(dst FP8Out, amax cuda.DevicePtr)) {
	e.t.Helper()
	codes, scales := quantizeHost(v, rows, n, r)
	key := math.Float32bits(fp8.Amax(v)) & 0x7fffffff
	s, inv := fp8.ScaleFromAmax(fp8.Amax(v), r.Format, r.Margin, r.PowerOf2)
	big := math.Float32bits(1e30)
	for _, c := range []struct {
		scale, inv float32
		amax0      uint32
	}{{s, inv, 0}, {s / 4, inv * 4, big}, {s * 4, inv / 4, 0}} {
		dst, _ := e.fp8Dst(rows, n, r)
		dst.Scale = cudatest.Alloc(e.t, e.d, 4)
		must(e.t, e.s.Upload(dst.Scale, cuda.Bytes([]float32{c.scale})))
		amax := cudatest.Alloc(e.t, e.d, 4)
		must(e.t, e.s.Upload(amax, cuda.Bytes([]uint32{c.amax0})))
		run(dst, amax)
		want, wantInv := codes, scales
		if c.scale != s {
			want = make([]byte, rows*n)
			fp8.CastScaled(want, v, c.scale, r.Format)
			wantInv = cuda.Bytes([]float32{c.inv})
		}
		e.same(fmt.Sprintf("%s scale %g codes", name, c.scale), e.bytes(dst.Data, rows*n), want)
		e.same(fmt.Sprintf("%s scale %g scale_inv", name, c.scale), e.bytes(dst.ScaleInv, 4), wantInv)
		e.same(fmt.Sprintf("%s scale %g amax", name, c.scale), e.bytes(amax, 4), cuda.Bytes([]uint32{max(key, c.amax0)}))
	}
}

// TestGPTLayerNormFP8Delayed checks GPTLayerNormFP8 with a delayed scale
// (FP8Out.Scale) in every variant the device loads, for every shape of
// fusedShapes, with and without the residual connection (checkDelayed,
// against GPTBiasResidual and GPTLayerNorm on the GPU): the residual
// stream, mean and rstd must also be the reference's.
func TestGPTLayerNormFP8Delayed(t *testing.T) {
	d, sets := loadAll(t)
	e := &fusedEnv{t: t, d: d, s: cudatest.Stream(t, d), r: rand.New(rand.NewPCG(13, 17))}
	const eps = 1e-5
	for _, k := range sets {
		for _, sh := range fusedShapes {
			rows, n := sh[0], sh[1]
			for _, residual := range []residualCase{noResidual, alignedResidual, offsetResidual} {
				for _, r := range delayedRecipes {
					name := fmt.Sprintf("%v/%dx%d/residual=%d/%v", k.Library().Variant(), rows, n, residual, r)
					x := e.f32(rows*n, 0.3, 2)
					ref := LayerNormRows{X: e.copyOf(x, 4*rows*n), W: e.bf(n, 1, 0.2), B: e.bf(n, 0, 0.5), Mean: e.f32(rows, 0, 1), Rstd: e.f32(rows, 0, 1), Rows: rows, N: n, Eps: eps}
					if residual != noResidual {
						ref.Residual, ref.Bias = e.f32(rows*n+1, 0, 1), e.bf(n+1, 0, 1)
						if residual == offsetResidual { // off alignment: the kernel must not change
							ref.Residual, ref.Bias = ref.Residual+4, ref.Bias+2
						}
						must(t, k.GPTBiasResidual(e.s, ref.X, ref.Residual, ref.Bias, rows, n))
					}
					y := cudatest.Alloc(t, d, 4*rows*n)
					must(t, k.GPTLayerNorm(e.s, y, ref.Mean, ref.Rstd, ref.X, ref.W, ref.B, rows, n, eps))
					e.checkDelayed(name, e.floats(y, rows*n), rows, n, r, func(dst FP8Out, amax cuda.DevicePtr) {
						got := ref
						got.X, got.Mean, got.Rstd = e.copyOf(x, 4*rows*n), e.f32(rows, 0, 1), e.f32(rows, 0, 1)
						must(t, k.GPTLayerNormFP8(e.s, dst, amax, got))
						e.same(name+" x", e.bytes(got.X, 4*rows*n), e.bytes(ref.X, 4*rows*n))
						e.same(name+" mean", e.bytes(got.Mean, 4*rows), e.bytes(ref.Mean, 4*rows))
						e.same(name+" rstd", e.bytes(got.Rstd, 4*rows), e.bytes(ref.Rstd, 4*rows))
					})
				}
			}
		}
	}
}

// TestGPTGELUFP8Delayed checks GPTBiasGELUFP8 and GPTGELUFP8 with a
// delayed scale (checkDelayed, against GPTBiasAddBF16 and GPTGELUBF16 on
// the GPU) in every variant the device loads, for whole and partial
// vectors and fc off the eight-wide path's alignment: the kept bfloat16 fc
// must be the reference's, or unchanged.
func TestGPTGELUFP8Delayed(t *testing.T) {
	d, sets := loadAll(t)
	e := &fusedEnv{t: t, d: d, s: cudatest.Stream(t, d), r: rand.New(rand.NewPCG(19, 23))}
	for _, k := range sets {
		for _, sh := range [][2]int{{33, 512}, {17, 200}, {9, 130}, {64, 3072}} {
			rows, n := sh[0], sh[1]
			for _, r := range delayedRecipes {
				name := fmt.Sprintf("%v/%dx%d/%v", k.Library().Variant(), rows, n, r)
				x, b := e.f32(rows*n, 0, 2), e.bf(n, 0, 0.5)
				ref16, g := cudatest.Alloc(t, d, 2*rows*n), cudatest.Alloc(t, d, 4*rows*n)
				must(t, k.GPTBiasAddBF16(e.s, ref16, x, b, rows, n))
				must(t, k.GPTGELUBF16(e.s, g, ref16, rows*n))
				e.checkDelayed(name+" bias", e.floats(g, rows*n), rows, n, r, func(dst FP8Out, amax cuda.DevicePtr) {
					y16 := cudatest.Alloc(t, d, 2*rows*n)
					must(t, k.GPTBiasGELUFP8(e.s, dst, amax, y16, x, b, rows, n))
					e.same(name+" fc", e.bytes(y16, 2*rows*n), e.bytes(ref16, 2*rows*n))
				})
				for _, off := range []int{0, 2} {
					fc := e.bf(rows*n+4, 0, 2) + cuda.DevicePtr(off)
					before := e.bytes(fc, 2*rows*n)
					must(t, k.GPTGELUBF16(e.s, g, fc, rows*n))
					e.checkDelayed(fmt.Sprintf("%s +%d", name, off), e.floats(g, rows*n), rows, n, r, func(dst FP8Out, amax cuda.DevicePtr) {
						must(t, k.GPTGELUFP8(e.s, dst, amax, fc, rows, n))
						e.same(name+" fc unchanged", e.bytes(fc, 2*rows*n), before)
					})
				}
			}
		}
	}
}

// TestGPTActScales checks GPTActScales against the fp8 package over
// l + 2 passes of histories of length 1, 4 and 40 (more than a warp's
// lanes), the amaxes falling from pass to pass so that the key a pass
// drops is the largest: each row is a ring whose position pass mod l takes
// the pass's amax, the amax is zeroed, and the scale is
// fp8.ScaleFromAmax of the row's largest value (1 while the row is all
// zero); with a margin and power-of-2 scales too, and keys with the sign
// bit set (ignored).
func TestGPTActScales(t *testing.T) {
	d, sets := loadAll(t)
	s := cudatest.Stream(t, d)
	e := &fusedEnv{t: t, d: d, s: s}
	rng := rand.New(rand.NewPCG(29, 31))
	const n = 70
	for _, k := range sets {
		for _, l := range []int{1, 4, 40} {
			for _, r := range delayedRecipes {
				hist := make([]uint32, n*l)
				dh, da, ds := cudatest.Alloc(t, d, 4*n*l), cudatest.Alloc(t, d, 4*n), cudatest.Alloc(t, d, 4*n)
				must(t, s.Upload(dh, cuda.Bytes(hist)))
				for pass := range l + 2 {
					amax := make([]uint32, n)
					for i := range amax {
						amax[i] = math.Float32bits(float32(rng.Float64() * math.Pow(2, float64(20-pass))))
						if i%9 == 0 {
							amax[i] = 0
						}
						if i%7 == 0 {
							amax[i] |= 0x80000000
						}
					}
					must(t, s.Upload(da, cuda.Bytes(amax)))
					must(t, k.GPTActScales(s, ds, dh, da, n, l, pass%l, r))
					want := make([]float32, n)
					for i := range n {
						row := hist[i*l : (i+1)*l]
						row[pass%l] = amax[i] & 0x7fffffff
						var m float32
						for _, v := range row {
							m = max(m, math.Float32frombits(v))
						}
						want[i], _ = fp8.ScaleFromAmax(m, r.Format, r.Margin, r.PowerOf2)
					}
					name := fmt.Sprintf("%v/l=%d/%v/pass %d", k.Library().Variant(), l, r, pass)
					e.same(name+" scales", e.bytes(ds, 4*n), cuda.Bytes(want))
					e.same(name+" histories", e.bytes(dh, 4*n*l), cuda.Bytes(hist))
					e.same(name+" amax zeroed", e.bytes(da, 4*n), make([]byte, 4*n))
				}
			}
		}
	}
}
