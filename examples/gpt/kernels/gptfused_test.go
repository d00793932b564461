package kernels

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/distopt/distopt/bf16"
	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/cuda/cudatest"
	"github.com/distopt/distopt/fp8"
)

// fusedRecipes are the recipes the fused kernels write: per-tensor current
// scaling (with a margin and power-of-2 scales too, the arguments the
// scale rule takes) and 1x128 blocks in both formats.
var fusedRecipes = []fp8.Recipe{
	{Format: fp8.E4M3, Scaling: fp8.TensorCurrent},
	{Format: fp8.E5M2, Scaling: fp8.TensorCurrent, Margin: 1, PowerOf2: true},
	{Format: fp8.E4M3, Scaling: fp8.Block1x128},
	{Format: fp8.E5M2, Scaling: fp8.Block1x128, PowerOf2: true},
}

// fusedShapes are [rows, n]: rows of each register variant (128: v4; 200:
// v4 with a partial 1x128 block; 768: v8; 2048: v16, the 1.3B model's
// width) and of the any-width kernels (2560: too wide; 130: not a
// multiple of 4), rows not a multiple of the warps of a block.
var fusedShapes = [][2]int{{37, 128}, {19, 200}, {21, 768}, {9, 2048}, {5, 2560}, {11, 130}}

// quantizeHost is the CPU reference of gemm's Quantize of the float32
// matrix v [rows, n] with recipe r: the fp8 package's current scaling
// (ScaleFromAmax, CastScaled) or fp8.CastBlocks1D along each row, the
// scale_inv of block j of row i at j*rows + i. It returns the codes and
// the scale_inv bytes.
func quantizeHost(v []float32, rows, n int, r fp8.Recipe) (codes, scales []byte) {
	codes = make([]byte, rows*n)
	if r.Scaling == fp8.TensorCurrent {
		s, inv := fp8.ScaleFromAmax(fp8.Amax(v), r.Format, r.Margin, r.PowerOf2)
		fp8.CastScaled(codes, v, s, r.Format)
		return codes, cuda.Bytes([]float32{inv})
	}
	nb := (n + 127) / 128
	si, inv := make([]float32, rows*nb), make([]float32, nb)
	for i := range rows {
		fp8.CastBlocks1D(codes[i*n:(i+1)*n], inv, v[i*n:(i+1)*n], 128, r.Format, r.Margin, r.PowerOf2)
		for j, s := range inv {
			si[j*rows+i] = s
		}
	}
	return codes, cuda.Bytes(si)
}

// fusedEnv holds a stream and the helpers of the fused kernels' tests.
type fusedEnv struct {
	t testing.TB
	d *cuda.Device
	s *cuda.Stream
	r *rand.Rand
}

// f32 uploads n float32 values of standard deviation std around mean.
func (e *fusedEnv) f32(n int, mean, std float64) cuda.DevicePtr {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(mean + std*e.r.NormFloat64())
	}
	p := cudatest.Alloc(e.t, e.d, 4*n)
	must(e.t, e.s.Upload(p, cuda.Bytes(v)))
	return p
}

// bf uploads n bfloat16 values of standard deviation std around mean.
func (e *fusedEnv) bf(n int, mean, std float64) cuda.DevicePtr {
	v := make([]uint16, n)
	for i := range v {
		v[i] = bf16.FromFloat32(float32(mean + std*e.r.NormFloat64()))
	}
	p := cudatest.Alloc(e.t, e.d, 2*n)
	must(e.t, e.s.Upload(p, cuda.Bytes(v)))
	return p
}

// copyOf returns a new device copy of the n bytes at p.
func (e *fusedEnv) copyOf(p cuda.DevicePtr, n int) cuda.DevicePtr {
	c := cudatest.Alloc(e.t, e.d, n)
	must(e.t, e.s.CopyDtoD(c, p, n))
	return c
}

// bytes downloads n bytes at p.
func (e *fusedEnv) bytes(p cuda.DevicePtr, n int) []byte {
	b := make([]byte, n)
	must(e.t, e.s.Download(b, p))
	return b
}

// floats downloads n float32 values at p.
func (e *fusedEnv) floats(p cuda.DevicePtr, n int) []float32 {
	v := make([]float32, n)
	must(e.t, e.s.Download(cuda.Bytes(v), p))
	return v
}

// same reports an error unless got and want (bytes of the named tensor)
// are equal, naming the first difference.
func (e *fusedEnv) same(name string, got, want []byte) {
	e.t.Helper()
	if bytes.Equal(got, want) {
		return
	}
	for i := range want {
		if got[i] != want[i] {
			e.t.Errorf("%s: byte %d of %d is %#x, want %#x", name, i, len(want), got[i], want[i])
			return
		}
	}
}

// fp8Dst allocates an FP8 output of rows x n codes with recipe r.
func (e *fusedEnv) fp8Dst(rows, n int, r fp8.Recipe) (FP8Out, int) {
	sb := 4
	if r.Scaling == fp8.Block1x128 {
		sb = 4 * rows * ((n + 127) / 128)
	}
	return FP8Out{Data: cudatest.Alloc(e.t, e.d, rows*n), ScaleInv: cudatest.Alloc(e.t, e.d, sb), Recipe: r}, sb
}

// TestGPTLayerNormFP8 checks GPTLayerNormFP8 against today's unfused
// kernels and the fp8 package, bit for bit, in every variant the device
// loads, for every shape of fusedShapes and recipe of fusedRecipes, with
// and without the residual connection (see residualCase): the reference
// is GPTBiasResidual (when there is one) and GPTLayerNorm on the GPU,
// their float32 output quantized on the CPU by quantizeHost. The residual stream, mean, rstd,
// codes and scale_inv must all be the reference's.
func TestGPTLayerNormFP8(t *testing.T) {
	d, sets := loadAll(t)
	e := &fusedEnv{t: t, d: d, s: cudatest.Stream(t, d), r: rand.New(rand.NewPCG(3, 7))}
	amax := cudatest.Alloc(t, d, 4)
	for _, k := range sets {
		for _, sh := range fusedShapes {
			rows, n := sh[0], sh[1]
			for _, residual := range []residualCase{noResidual, alignedResidual, offsetResidual} {
				for _, r := range fusedRecipes {
					name := fmt.Sprintf("%v/%dx%d/residual=%d/%v", k.Library().Variant(), rows, n, residual, r)
					e.layerNormFP8(name, k, amax, rows, n, residual, r)
				}
			}
		}
	}
}

// residualCase is how a case of TestGPTLayerNormFP8 takes the residual
// connection: none, or from aligned residual and bias pointers, or from
// pointers 4 and 2 bytes past alignment (which must not change the
// kernel, hence the statistics).
type residualCase int

const (
	noResidual residualCase = iota
	alignedResidual
	offsetResidual
)

// layerNormFP8 is one case of TestGPTLayerNormFP8.
func (e *fusedEnv) layerNormFP8(name string, k *Set, amax cuda.DevicePtr, rows, n int, residual residualCase, r fp8.Recipe) {
	const eps = 1e-5
	x := e.f32(rows*n, 0.3, 2)
	w, b := e.bf(n, 1, 0.2), e.bf(n, 0, 0.5)
	ref := LayerNormRows{X: e.copyOf(x, 4*rows*n), W: w, B: b, Mean: e.f32(rows, 0, 1), Rstd: e.f32(rows, 0, 1), Rows: rows, N: n, Eps: eps}
	if residual != noResidual {
		ref.Residual, ref.Bias = e.f32(rows*n+1, 0, 1), e.bf(n+1, 0, 1)
		if residual == offsetResidual {
			ref.Residual, ref.Bias = ref.Residual+4, ref.Bias+2
		}
		must(e.t, k.GPTBiasResidual(e.s, ref.X, ref.Residual, ref.Bias, rows, n))
	}
	y := cudatest.Alloc(e.t, e.d, 4*rows*n)
	must(e.t, k.GPTLayerNorm(e.s, y, ref.Mean, ref.Rstd, ref.X, w, b, rows, n, eps))
	codes, scales := quantizeHost(e.floats(y, rows*n), rows, n, r)

	got := ref
	got.X, got.Mean, got.Rstd = x, e.f32(rows, 0, 1), e.f32(rows, 0, 1)
	dst, sb := e.fp8Dst(rows, n, r)
	must(e.t, k.GPTLayerNormFP8(e.s, dst, amax, got))
	e.same(name+" x", e.bytes(got.X, 4*rows*n), e.bytes(ref.X, 4*rows*n))
	e.same(name+" mean", e.bytes(got.Mean, 4*rows), e.bytes(ref.Mean, 4*rows))
	e.same(name+" rstd", e.bytes(got.Rstd, 4*rows), e.bytes(ref.Rstd, 4*rows))
	e.same(name+" codes", e.bytes(dst.Data, rows*n), codes)
	e.same(name+" scale_inv", e.bytes(dst.ScaleInv, sb), scales)
}

// TestGPTBiasGELUFP8 checks GPTBiasGELUFP8 against today's unfused
// kernels and the fp8 package, bit for bit, in every variant the device
// loads: GPTBiasAddBF16 and GPTGELUBF16 on the GPU, the float32 GELU
// quantized on the CPU by quantizeHost. The kept bfloat16, codes and
// scale_inv must be the reference's; widths of whole and partial 1x128
// blocks, and one not a multiple of 4 (the scalar paths).
func TestGPTBiasGELUFP8(t *testing.T) {
	d, sets := loadAll(t)
	e := &fusedEnv{t: t, d: d, s: cudatest.Stream(t, d), r: rand.New(rand.NewPCG(4, 9))}
	amax := cudatest.Alloc(t, d, 4)
	for _, k := range sets {
		for _, sh := range [][2]int{{33, 512}, {17, 200}, {9, 130}, {64, 3072}} {
			rows, n := sh[0], sh[1]
			for _, r := range fusedRecipes {
				name := fmt.Sprintf("%v/%dx%d/%v", k.Library().Variant(), rows, n, r)
				x, b := e.f32(rows*n, 0, 2), e.bf(n, 0, 0.5)
				ref16, g := cudatest.Alloc(t, d, 2*rows*n), cudatest.Alloc(t, d, 4*rows*n)
				must(t, k.GPTBiasAddBF16(e.s, ref16, x, b, rows, n))
				must(t, k.GPTGELUBF16(e.s, g, ref16, rows*n))
				codes, scales := quantizeHost(e.floats(g, rows*n), rows, n, r)
				y16 := cudatest.Alloc(t, d, 2*rows*n)
				dst, sb := e.fp8Dst(rows, n, r)
				must(t, k.GPTBiasGELUFP8(e.s, dst, amax, y16, x, b, rows, n))
				e.same(name+" fc", e.bytes(y16, 2*rows*n), e.bytes(ref16, 2*rows*n))
				e.same(name+" codes", e.bytes(dst.Data, rows*n), codes)
				e.same(name+" scale_inv", e.bytes(dst.ScaleInv, sb), scales)
			}
		}
	}
}

// TestGPTGELUFP8 checks GPTGELUFP8, which reads a bfloat16 fc as the GEMM's
// epilogue writes it (with its bias), against today's unfused kernels and
// the fp8 package, bit for bit, in every variant the device loads:
// GPTGELUBF16 on the GPU, its float32 output quantized on the CPU by
// quantizeHost. Codes and scale_inv must be the reference's and fc
// unchanged; the widths of TestGPTBiasGELUFP8 (a length not a multiple
// of 8 takes the scalar tail), and fc at a 2- and an 8-byte offset (off
// the eight-wide path's 16-byte alignment: the scalar paths).
func TestGPTGELUFP8(t *testing.T) {
	d, sets := loadAll(t)
	e := &fusedEnv{t: t, d: d, s: cudatest.Stream(t, d), r: rand.New(rand.NewPCG(5, 11))}
	amax := cudatest.Alloc(t, d, 4)
	for _, k := range sets {
		for _, sh := range [][2]int{{33, 512}, {17, 200}, {9, 130}, {64, 3072}} {
			rows, n := sh[0], sh[1]
			for _, off := range []int{0, 2, 8} {
				for _, r := range fusedRecipes {
					name := fmt.Sprintf("%v/%dx%d/+%d/%v", k.Library().Variant(), rows, n, off, r)
					fc := e.bf(rows*n+4, 0, 2) + cuda.DevicePtr(off)
					before := e.bytes(fc, 2*rows*n)
					g := cudatest.Alloc(t, d, 4*rows*n)
					must(t, k.GPTGELUBF16(e.s, g, fc, rows*n))
					codes, scales := quantizeHost(e.floats(g, rows*n), rows, n, r)
					dst, sb := e.fp8Dst(rows, n, r)
					must(t, k.GPTGELUFP8(e.s, dst, amax, fc, rows, n))
					e.same(name+" fc", e.bytes(fc, 2*rows*n), before)
					e.same(name+" codes", e.bytes(dst.Data, rows*n), codes)
					e.same(name+" scale_inv", e.bytes(dst.ScaleInv, sb), scales)
				}
			}
		}
	}
}

// TestFP8OutRecipes checks, without a GPU, that the fused launchers
// refuse recipes they do not write (delayed scaling, 128x128 tiles, MXFP8,
// an invalid format) before touching the device, and that the recipe's
// constants reach the kernels as fp8.ScaleFromAmax uses them.
func TestFP8OutRecipes(t *testing.T) {
	var k *Set // never dereferenced: the recipe is refused first
	for _, r := range []fp8.Recipe{{Format: fp8.E4M3, Scaling: fp8.TensorDelayed}, {Format: fp8.E4M3, Scaling: fp8.Block128x128},
		{Format: fp8.E4M3, Scaling: fp8.MXFP8}, {Format: 9, Scaling: fp8.TensorCurrent}} {
		dst := FP8Out{Recipe: r}
		if err := k.GPTLayerNormFP8(nil, dst, 0, LayerNormRows{Rows: 1, N: 4}); err == nil {
			t.Errorf("GPTLayerNormFP8 with %v: no error", r)
		}
		if err := k.GPTBiasGELUFP8(nil, dst, 0, 0, 0, 0, 1, 4); err == nil {
			t.Errorf("GPTBiasGELUFP8 with %v: no error", r)
		}
		if err := k.GPTGELUFP8(nil, dst, 0, 0, 1, 4); err == nil {
			t.Errorf("GPTGELUFP8 with %v: no error", r)
		}
	}
	for _, r := range fusedRecipes {
		if _, err := (FP8Out{Recipe: r}).suffix(); err != nil {
			t.Errorf("%v: %v", r, err)
		}
		_, err := (FP8Out{Recipe: r, Scale: 256}).suffix()
		if (err == nil) != (r.Scaling == fp8.TensorCurrent) {
			t.Errorf("%v with a delayed scale: %v", r, err)
		}
	}
	fmax, mfac, pow2 := FP8Out{Recipe: fp8.Recipe{Format: fp8.E5M2, Scaling: fp8.TensorCurrent, Margin: 3, PowerOf2: true}}.constants()
	if fmax != 57344 || mfac != 0.125 || pow2 != 1 {
		t.Errorf("E5M2 margin 3, power of 2: constants %v, %v, %v; want 57344, 0.125, 1", fmax, mfac, pow2)
	}
	if fmax, mfac, pow2 := (FP8Out{Recipe: fusedRecipes[0]}).constants(); fmax != 448 || mfac != 1 || pow2 != 0 {
		t.Errorf("E4M3: constants %v, %v, %v; want 448, 1, 0", fmax, mfac, pow2)
	}
}
