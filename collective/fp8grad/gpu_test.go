package fp8grad_test

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/fp8grad"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/cuda/cudatest"
	"github.com/distopt/distopt/internal/kernels"
)

// TestGPUCodec runs the GPU codec (internal/kernels gradq_*, gradsum_*)
// and the CPU reference on the same gradients — spanning the FP8 range,
// with zeros, blocks of zeros and non-finite values, odd sizes, with and
// without error feedback — and demands the same bytes: wire pieces,
// residuals, and sums in float32 and bfloat16. Skips without a GPU (see
// cudatest).
func TestGPUCodec(t *testing.T) {
	d := cudatest.Require(t)
	var sets []*kernels.Set
	for _, v := range kernels.Variants {
		k, err := kernels.LoadVariant(d, v)
		if err != nil {
			t.Logf("variant %v: %v", v, err)
			continue
		}
		t.Cleanup(func() { k.Close() })
		sets = append(sets, k)
	}
	if len(sets) == 0 {
		t.Fatal("no kernel variant loads")
	}
	s := cudatest.Stream(t, d)
	for _, k := range sets {
		for _, f := range []fp8.Format{fp8.E4M3, fp8.E5M2} {
			for _, e := range []kernels.Elem{kernels.F32, kernels.BF16} {
				for _, block := range []int{7, 128} {
					for _, n := range []int{1, 129, 300, 4099} {
						for _, pieces := range []int{1, 3, 4} {
							for _, ef := range []bool{false, true} {
								name := fmt.Sprintf("%v/%v/%v/block=%d/n=%d/d=%d/ef=%t", k.Variant(), f, e, block, n, pieces, ef)
								t.Run(name, func(t *testing.T) {
									gpuCase(t, k, s, f, e, block, n, pieces, ef)
								})
							}
						}
					}
				}
			}
		}
	}
}

func gpuCase(t *testing.T, k *kernels.Set, s *cuda.Stream, f fp8.Format, e kernels.Elem, block, n, pieces int, ef bool) {
	if got, want := kernels.GradPieceBytes(n, block), fp8grad.PieceBytes(n, block); got != want {
		t.Fatalf("GradPieceBytes %d, PieceBytes %d", got, want)
	}
	d := s.Device()
	rng := rand.New(rand.NewPCG(uint64(n), uint64(block*pieces)))
	x := input(uint64(n*pieces), block, pieces*n, block)
	for range 3 {
		x[rng.IntN(len(x))] = []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}[rng.IntN(3)]
	}
	raw, vals := encode(x, dtypeOf(e))
	res := make([]float32, pieces*n)
	for i := range res {
		res[i] = float32(rng.NormFloat64() * 1e-3)
	}
	pb := fp8grad.PieceBytes(n, block)
	const guard = 64
	src := cudatest.Alloc(t, d, len(raw))
	wire := cudatest.Alloc(t, d, pieces*pb+guard)
	resDev := cuda.DevicePtr(0)
	if ef {
		resDev = cudatest.Alloc(t, d, 4*len(res))
		must(t, s.Upload(resDev, collective.ToBytes(res)))
	}
	must(t, s.Upload(src, raw))
	must(t, s.Upload(wire, bytes.Repeat([]byte{0xa5}, pieces*pb+guard)))
	must(t, k.GradQuantize(s, wire, src, resDev, n, pieces, block, e, f))

	want := make([]byte, pieces*pb)
	for p := range pieces {
		var rp []float32
		if ef {
			rp = res[p*n : (p+1)*n]
		}
		fp8grad.Quantize(want[p*pb:(p+1)*pb], vals[p*n:(p+1)*n], rp, block, f)
	}
	got := make([]byte, pieces*pb+guard)
	must(t, s.Download(got, wire))
	if i := firstDiff(got[:pieces*pb], want); i >= 0 {
		t.Fatalf("wire byte %d (piece %d): %#x, want %#x", i, i/pb, got[i], want[i])
	}
	if !bytes.Equal(got[pieces*pb:], bytes.Repeat([]byte{0xa5}, guard)) {
		t.Fatal("GradQuantize wrote past the pieces")
	}
	if ef {
		gres := make([]byte, 4*len(res))
		must(t, s.Download(gres, resDev))
		if i := firstDiff(gres, collective.ToBytes(res)); i >= 0 {
			t.Fatalf("residual byte %d differs", i)
		}
	}

	es := dtypeOf(e).Size()
	for _, div := range []float32{1, float32(pieces)} {
		out := cudatest.Alloc(t, d, n*es+guard)
		must(t, s.Upload(out, bytes.Repeat([]byte{0xa5}, n*es+guard)))
		must(t, k.GradSum(s, out, wire, n, pieces, block, e, f, div))
		gotSum := make([]byte, n*es+guard)
		must(t, s.Download(gotSum, out))
		list := make([][]byte, pieces)
		for p := range pieces {
			list[p] = want[p*pb : (p+1)*pb]
		}
		sum := make([]float32, n)
		fp8grad.DequantSum(sum, list, block, f, div)
		wantSum, _ := encode(sum, dtypeOf(e))
		if i := firstDiff(gotSum[:n*es], wantSum); i >= 0 {
			t.Fatalf("div %g: sum byte %d (element %d) %#x, want %#x", div, i, i/es, gotSum[i], wantSum[i])
		}
		if !bytes.Equal(gotSum[n*es:], bytes.Repeat([]byte{0xa5}, guard)) {
			t.Fatal("GradSum wrote past dst")
		}
	}
}

func dtypeOf(e kernels.Elem) buffer.DType {
	if e == kernels.BF16 {
		return buffer.BFloat16
	}
	return buffer.Float32
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
