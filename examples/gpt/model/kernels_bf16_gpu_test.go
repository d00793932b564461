package model_test

import (
	"math"
	"testing"

	"github.com/distopt/distopt/bf16"
	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/cuda/cudatest"
	"github.com/distopt/distopt/examples/gpt/kernels"
	"github.com/distopt/distopt/examples/gpt/model"
)

// TestGPUBF16Activations checks the kernels of the activations the GPU
// model keeps in bfloat16 (qkv and fc), on the float4 paths (96 and 3072
// columns) and the scalar ones (30 columns, or x 4 bytes off 16-byte
// alignment):
//   - GPTBiasAddBF16 bit for bit against the float32 sum rounded by
//     model.RoundBF16 (both the sum and the rounding are exact IEEE
//     operations, so nothing is left to tolerance);
//   - GPTGELUBF16 and GPTGELUGradBF16 against model.GELU and GELUBackward
//     of the same bfloat16 values, to the float32 tolerance of the
//     float32 GELU kernels (TestGPUElementwise);
//   - their results equal the float32 kernels' on the widened values bit
//     for bit (the same arithmetic, only the load differs).
func TestGPUBF16Activations(t *testing.T) {
	g := newGPU(t)
	for _, c := range []struct {
		rows, n, off int // off: x starts off floats into its buffer
	}{{37, 96, 0}, {300, 3072, 0}, {33, 30, 0}, {20, 96, 1}} {
		rows, n := c.rows, c.n
		t.Logf("%d rows of %d, x offset %d", rows, n, c.off)
		xBuf, xAll := g.f32(rows*n+c.off, 3)
		x, xRef := xBuf.Add(4*c.off), xAll[c.off:]
		b, bRef := g.bf(n, 0, 1)
		y16 := cudatest.Alloc(t, g.d, 2*rows*n)
		g.must(g.k.GPTBiasAddBF16(g.s, y16, x, b, rows, n))
		want := make([]float64, rows*n)
		for i := range want {
			want[i] = float64(float32(xRef[i]) + float32(bRef[i%n]))
		}
		model.RoundBF16(want)
		got := g.bf16s(y16, rows*n)
		for i, v := range got {
			if v != want[i] {
				t.Fatalf("bias add bf16[%d] = %v, want %v (x %v, b %v)", i, v, want[i], xRef[i], bRef[i%n])
			}
		}

		// GELU of the bfloat16 y16, and the same of its float32 widening.
		wide := g.upload32(got)
		y, yWide := cudatest.Alloc(t, g.d, 4*rows*n), cudatest.Alloc(t, g.d, 4*rows*n)
		g.must(g.k.GPTGELUBF16(g.s, y, y16, rows*n))
		g.must(g.k.GPTGELU(g.s, yWide, wide, rows*n))
		ref := make([]float64, rows*n)
		model.GELU(ref, got)
		g.check("gelu bf16", y, ref, 1e-5)
		g.checkExact("gelu bf16 against gelu of the widened values", y, g.f32s(yWide, rows*n))

		dy, dyRef := g.f32(rows*n, 1)
		g.must(g.k.GPTGELUGradBF16(g.s, y, dy, y16, rows*n))
		g.must(g.k.GPTGELUGrad(g.s, yWide, dy, wide, rows*n))
		model.GELUBackward(ref, dyRef, got)
		g.check("gelu grad bf16", y, ref, 1e-5)
		g.checkExact("gelu grad bf16 against the float32 kernel", y, g.f32s(yWide, rows*n))
	}
}

// TestGPUSplitHeadsFromBF16 checks the copies of the heads of a bfloat16
// qkv (the model's) into the packed layouts attention reads, float32
// (AttentionSplitHeadsFromBF16) and bfloat16 (BF16FromBF16), bit for bit
// against the layout written out here, for q, k and v of a [batch·seq,
// 3h] activation, with heads of 64 (four elements at a time) and of 6
// (one at a time).
func TestGPUSplitHeadsFromBF16(t *testing.T) {
	g := newGPU(t)
	for _, c := range []struct{ batch, seq, heads, d int }{{2, 37, 2, 64}, {3, 5, 3, 6}} {
		h, rows := c.heads*c.d, c.batch*c.seq
		src, ref := g.bf(rows*3*h, 0, 1)
		for part := range 3 {
			l := kernels.HeadLayout{Batch: c.batch, Seq: c.seq, Heads: c.heads, D: c.d, LD: 3 * h, Off: part * h}
			dst32, dst16 := cudatest.Alloc(t, g.d, 4*rows*h), cudatest.Alloc(t, g.d, 2*rows*h)
			g.must(g.k.AttentionSplitHeadsFromBF16(g.s, dst32, src, l))
			g.must(g.k.AttentionSplitHeadsBF16FromBF16(g.s, dst16, src, l))
			want := make([]float64, rows*h)
			for b := range c.batch {
				for tt := range c.seq {
					for k := range c.heads {
						for e := range c.d {
							want[((b*c.heads+k)*c.seq+tt)*c.d+e] = ref[(b*c.seq+tt)*3*h+part*h+k*c.d+e]
						}
					}
				}
			}
			g.checkExact("split from bfloat16 into float32", dst32, want)
			for i, v := range g.bf16s(dst16, rows*h) {
				if v != want[i] {
					t.Fatalf("%+v part %d: split bfloat16 [%d] = %v, want %v", c, part, i, v, want[i])
				}
			}
		}
	}
}

// bf16s downloads n bfloat16 values at p, widened to float64.
func (g *gpuEnv) bf16s(p cuda.DevicePtr, n int) []float64 {
	raw := make([]uint16, n)
	g.must(g.s.Download(cuda.Bytes(raw), p))
	out := make([]float64, n)
	for i, v := range raw {
		out[i] = float64(bf16.ToFloat32(v))
	}
	return out
}

// f32s downloads n float32 values at p, as float64.
func (g *gpuEnv) f32s(p cuda.DevicePtr, n int) []float64 {
	raw := make([]float32, n)
	g.must(g.s.Download(cuda.Bytes(raw), p))
	out := make([]float64, n)
	for i, v := range raw {
		out[i] = float64(v)
	}
	return out
}

// upload32 uploads v (float32 values) as float32.
func (g *gpuEnv) upload32(v []float64) cuda.DevicePtr {
	f := make([]float32, len(v))
	for i, x := range v {
		f[i] = float32(x)
	}
	p := cudatest.Alloc(g.t, g.d, 4*max(len(f), 1))
	g.must(g.s.Upload(p, cuda.Bytes(f)))
	return p
}

// TestGPURoundBF16 checks GPTRoundBF16 (the roundings of the -head-precision
// bf16 head) bit for bit against model.RoundBF16 (bf16.Round) on random
// values of several scales and on the edge cases: ties to even both ways,
// the largest float32 and a value just below bfloat16's overflow threshold
// (both round to Inf, or not), infinities, NaN, signed zeros, subnormals;
// in place, into another buffer, and with add (y + bf16(x), the float32
// sum); and GPTRoundBF16Pack's float32 output and bfloat16 codes (the
// codes widened, and NaN a NaN code); for a short length and one longer
// than a grid stride.
func TestGPURoundBF16(t *testing.T) {
	g := newGPU(t)
	edge := []float32{1 + 0x1p-8, 1 + 3*0x1p-8, -(1 + 0x1p-8), 1 + 0x1p-8 + 0x1p-20, math.MaxFloat32, -math.MaxFloat32,
		0x1.fefffep127, 0x1.ff0000p127, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
		0, float32(math.Copysign(0, -1)), 0x1p-149, 0x1.8p-140, -0x1.fffffcp-127, 65504, 1e-30}
	for _, n := range []int{len(edge), 37, 3<<20 + 5} {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(math.Ldexp(g.r.NormFloat64(), g.r.IntN(40)-20))
		}
		copy(x, edge)
		y := make([]float32, n)
		for i := range y {
			y[i] = float32(g.r.NormFloat64())
		}
		xp, yp := g.upload(x), g.upload(y)
		out, packed, codes := cudatest.Alloc(t, g.d, 4*n), cudatest.Alloc(t, g.d, 4*n), cudatest.Alloc(t, g.d, 2*n)
		g.must(g.k.GPTRoundBF16(g.s, out, xp, n, false))
		g.must(g.k.GPTRoundBF16Pack(g.s, packed, codes, xp, n))
		c := make([]uint16, n)
		g.must(g.s.Download(cuda.Bytes(c), codes))
		widened := g.upload(widenedCodes(c))
		g.must(g.k.GPTRoundBF16(g.s, yp, xp, n, true))
		g.must(g.k.GPTRoundBF16(g.s, xp, xp, n, false))
		ref := make([]float64, n)
		for i, v := range x {
			ref[i] = float64(v)
		}
		model.RoundBF16(ref)
		for name, p := range map[string]cuda.DevicePtr{"rounded": out, "rounded in place": xp, "added": yp,
			"packed": packed, "packed codes": widened} {
			got := make([]float32, n)
			g.must(g.s.Download(cuda.Bytes(got), p))
			for i, v := range got {
				want := float32(ref[i])
				if name == "added" {
					want = y[i] + want
				}
				if math.Float32bits(v) != math.Float32bits(want) && !(math.IsNaN(float64(v)) && math.IsNaN(float64(want))) {
					t.Fatalf("n %d, %s[%d] of %v (%#x): %v (%#x), want %v (%#x)", n, name, i, x[i], math.Float32bits(x[i]),
						v, math.Float32bits(v), want, math.Float32bits(want))
				}
			}
		}
	}
}

// upload uploads v to a new buffer.
func (g *gpuEnv) upload(v []float32) cuda.DevicePtr {
	p := cudatest.Alloc(g.t, g.d, 4*max(len(v), 1))
	g.must(g.s.Upload(p, cuda.Bytes(v)))
	return p
}

// widenedCodes returns the bfloat16 codes c as float32 values.
func widenedCodes(c []uint16) []float32 {
	v := make([]float32, len(c))
	for i, h := range c {
		v[i] = bf16.ToFloat32(h)
	}
	return v
}
