package gemm

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/distopt/distopt/bf16"
	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/cuda"
	pcudatest "github.com/distopt/distopt/cuda/cudatest"
	"github.com/distopt/distopt/internal/cublaslt"
)

// TestDenseLayout checks what cuBLASLt is told of a dense operand: its
// element type, and every field of the layout as given; other types are
// refused with ErrShape.
func TestDenseLayout(t *testing.T) {
	for typ, want := range map[buffer.DType]cublaslt.DataType{buffer.Float32: cublaslt.R32F, buffer.BFloat16: cublaslt.R16BF} {
		m := Matrix{Type: typ, Rows: 64, Cols: 1024, LD: 2304, Batch: 12, Stride: 64, Align: 128}
		got, err := m.layout()
		if err != nil || got != (cublaslt.Matrix{Type: want, Rows: 64, Cols: 1024, LD: 2304, Batch: 12, Stride: 64, Align: 128}) {
			t.Errorf("%v: layout %+v, %v", typ, got, err)
		}
	}
	if _, err := (Matrix{Type: buffer.Uint8, Rows: 1, Cols: 1, LD: 1}).layout(); !errors.Is(err, ErrShape) {
		t.Errorf("uint8 operand: %v, want ErrShape", err)
	}
}

// TestDense runs strided batches of small products on the GPU, with each
// operand transposed or not, in float32 (FP32 and TF32) and bfloat16.
// Small integers make every product and sum exact, so the results must
// equal the CPU's to the bit.
func TestDense(t *testing.T) {
	d := pcudatest.Require(t)
	h, err := NewDense(d)
	pcudatest.Unavailable(t, err, ErrUnavailable)
	t.Cleanup(func() { must(t, h.Close()) })
	s := pcudatest.Stream(t, d)
	const m, n, k, batch = 16, 24, 32, 3
	ws := pcudatest.Alloc(t, d, 1<<20)
	r := rand.New(rand.NewPCG(3, 4))
	for _, c := range []struct {
		typ            buffer.DType
		tf32           bool
		transA, transB bool
	}{{buffer.Float32, false, true, false}, {buffer.Float32, true, false, true}, {buffer.BFloat16, false, true, false}, {buffer.BFloat16, false, false, true}} {
		a, b := make([]float32, batch*m*k), make([]float32, batch*k*n)
		for _, v := range [][]float32{a, b} {
			for i := range v {
				v[i] = float32(r.IntN(7) - 3)
			}
		}
		lda, ldb := map[bool]int{false: m, true: k}[c.transA], map[bool]int{false: k, true: n}[c.transB]
		spec := DenseSpec{TransA: c.transA, TransB: c.transB, TF32: c.tf32,
			A: Matrix{Type: c.typ, Rows: lda, Cols: m * k / lda, LD: lda, Batch: batch, Stride: m * k},
			B: Matrix{Type: c.typ, Rows: ldb, Cols: k * n / ldb, LD: ldb, Batch: batch, Stride: k * n},
			D: Matrix{Type: buffer.Float32, Rows: m, Cols: n, LD: m, Batch: batch, Stride: m * n}}
		p, err := h.Plan(spec, 1<<20)
		must(t, err)
		pa, pb, pd := upload(t, s, a, c.typ), upload(t, s, b, c.typ), pcudatest.Alloc(t, d, 4*batch*m*n)
		must(t, p.Run(s, pa, pb, pd, ws, 1<<20))
		got := make([]float32, batch*m*n)
		must(t, s.Download(cuda.Bytes(got), pd))
		must(t, p.Destroy())
		for bi := range batch {
			for i := range m {
				for j := range n {
					want := float32(0)
					for l := range k {
						x := a[bi*m*k+map[bool]int{false: i + l*lda, true: l + i*lda}[c.transA]]
						y := b[bi*k*n+map[bool]int{false: l + j*ldb, true: j + l*ldb}[c.transB]]
						want += x * y
					}
					if g := got[bi*m*n+i+j*m]; g != want {
						t.Fatalf("%+v: D[%d][%d, %d] = %v, want %v", c, bi, i, j, g, want)
					}
				}
			}
		}
	}
}

// upload copies v to the device as float32 or bfloat16 (exact for the
// small integers of TestDense).
func upload(t *testing.T, s *cuda.Stream, v []float32, typ buffer.DType) cuda.DevicePtr {
	b := cuda.Bytes(v)
	if typ == buffer.BFloat16 {
		h := make([]uint16, len(v))
		for i, x := range v {
			h[i] = bf16.FromFloat32(x)
		}
		b = cuda.Bytes(h)
	}
	p := pcudatest.Alloc(t, s.Device(), len(b))
	must(t, s.Upload(p, b))
	return p
}
