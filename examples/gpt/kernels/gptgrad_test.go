package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/distopt/distopt/bf16"
	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/cuda/cudatest"
)

// TestGradKernelsDefined checks that gptgrad.cu defines its launcher's
// kernel in every variant (CPU only).
func TestGradKernelsDefined(t *testing.T) { checkDefined(t, "gptgrad", gradKernels()) }

// accumulateBF16 is the host reference of GPTAccumulateBF16:
// bf16.FromFloat32 of the float32 sum of the widened dst and src.
func accumulateBF16(dst []uint16, src []float32) []uint16 {
	out := make([]uint16, len(dst))
	for i := range dst {
		out[i] = bf16.FromFloat32(bf16.ToFloat32(dst[i]) + src[i])
	}
	return out
}

// accumulateEdge is a view and a gradient to add into it.
type accumulateEdge struct {
	dst uint16
	src float32
}

// accumulateEdges returns the edge cases of TestGPUAccumulateBF16.
func accumulateEdges() []accumulateEdge {
	one := bf16.FromFloat32(1)
	return []accumulateEdge{
		{one, 0x1p-8}, {one, 3 * 0x1p-8}, {one, 0x1p-8 + 0x1p-20}, {bf16.FromFloat32(-1), -0x1p-8},
		{0x7f7f, 0x1p120}, {0x7f7f, 0x1p119}, {0x7f80, -math.MaxFloat32}, {0xff80, 1}, {0x7f80, float32(math.Inf(-1))},
		{0x7fff, 1}, {one, float32(math.NaN())}, {0, 0}, {0x8000, float32(math.Copysign(0, -1))}, {0x8000, 0},
		{0x0001, 0x1p-149}, {0x0001, -0x1p-133}, {one, -1}, {bf16.FromFloat32(3), -3 + 0x1p-30},
	}
}

// TestGPUAccumulateBF16 checks GPTAccumulateBF16 bit for bit against
// accumulateBF16 in every variant: random views and gradients of several
// scales (sums that round up, down and to even), and the edge cases (a
// tie to even either way, a sum just beyond bfloat16's largest finite
// value and one just below its rounding threshold, infinities, NaN,
// signed zeros, subnormals, a gradient that cancels the view); for a short
// length, one not a multiple of the block, and one longer than a grid
// stride; and twice in a row (two micro-batches). Zero elements queue
// nothing.
func TestGPUAccumulateBF16(t *testing.T) {
	d, sets := loadAll(t)
	s := cudatest.Stream(t, d)
	r := rand.New(rand.NewPCG(21, 22))
	edge := accumulateEdges()
	for _, k := range sets {
		for _, n := range []int{len(edge), 1000, 3<<20 + 5} {
			dst, src := make([]uint16, n), make([]float32, n)
			for i := range dst {
				dst[i] = bf16.FromFloat32(float32(math.Ldexp(r.NormFloat64(), r.IntN(30)-15)))
				src[i] = float32(math.Ldexp(r.NormFloat64(), r.IntN(30)-15))
			}
			for i, e := range edge {
				dst[i], src[i] = e.dst, e.src
			}
			dp, sp := cudatest.Alloc(t, d, 2*n), cudatest.Alloc(t, d, 4*n)
			must(t, s.Upload(dp, cuda.Bytes(dst)))
			must(t, s.Upload(sp, cuda.Bytes(src)))
			want := dst
			for pass := range 2 {
				must(t, k.GPTAccumulateBF16(s, dp, sp, n))
				want = accumulateBF16(want, src)
				got := make([]uint16, n)
				must(t, s.Download(cuda.Bytes(got), dp))
				for i := range got {
					if got[i] != want[i] {
						t.Fatalf("%v, n %d, pass %d: [%d] = %#04x, want %#04x (initial view %#04x, gradient %v)", k.lib.Variant(), n, pass, i, got[i], want[i], dst[i], src[i])
					}
				}
			}
			must(t, k.GPTAccumulateBF16(s, 0, 0, 0))
		}
	}
}

// TestGPUAccumulateBF16s checks GPTAccumulateBF16s bit for bit against
// accumulateBF16 for eleven sums in one call (two launches: eight, then
// three), of lengths from 0 to longer than a grid stride, the first
// holding the edge cases of TestGPUAccumulateBF16; views beside each other
// in one allocation, so that a write past a sum's end would show in its
// neighbour.
func TestGPUAccumulateBF16s(t *testing.T) {
	d, sets := loadAll(t)
	s := cudatest.Stream(t, d)
	r := rand.New(rand.NewPCG(23, 24))
	lens := []int{19, 768, 0, 2304, 1, 3072, 3<<20 + 5, 256, 0, 1000, 257}
	total := 0
	for _, n := range lens {
		total += n
	}
	for _, k := range sets {
		dst, src := make([]uint16, total), make([]float32, total)
		for i := range dst {
			dst[i] = bf16.FromFloat32(float32(math.Ldexp(r.NormFloat64(), r.IntN(30)-15)))
			src[i] = float32(math.Ldexp(r.NormFloat64(), r.IntN(30)-15))
		}
		for i, e := range accumulateEdges() {
			dst[i], src[i] = e.dst, e.src
		}
		dp, sp := cudatest.Alloc(t, d, 2*total), cudatest.Alloc(t, d, 4*total)
		must(t, s.Upload(dp, cuda.Bytes(dst)))
		must(t, s.Upload(sp, cuda.Bytes(src)))
		var sums []BF16Sum
		at := 0
		for _, n := range lens {
			sums = append(sums, BF16Sum{View: dp.Add(2 * at), Sum: sp.Add(4 * at), N: n})
			at += n
		}
		must(t, k.GPTAccumulateBF16s(s, sums))
		want := accumulateBF16(dst, src)
		got := make([]uint16, total)
		must(t, s.Download(cuda.Bytes(got), dp))
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%v: [%d] = %#04x, want %#04x (initial view %#04x, gradient %v)", k.lib.Variant(), i, got[i], want[i], dst[i], src[i])
			}
		}
		if err := k.GPTAccumulateBF16s(s, []BF16Sum{{View: dp, Sum: sp, N: -1}}); err == nil {
			t.Errorf("%v: a sum of -1 elements queued", k.lib.Variant())
		}
	}
}
