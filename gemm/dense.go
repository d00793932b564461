package gemm

import (
	"errors"
	"fmt"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/internal/cublaslt"
	icuda "github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/cudalink"
)

// Dense runs dense matrix products on cuBLASLt, for the parts of a model
// that are not linear layers, such as attention's scores. Operands are
// float32 or bfloat16, in strided batches of column-major matrices.
// Results and sums are float32. It needs cuBLASLt 12.0 or later, not the
// FP8 kernels of an Engine. A plan must not run from two goroutines at
// once.
type Dense struct {
	lt *cublaslt.Handle
}

// NewDense opens cuBLASLt for d. Without the library the error matches
// ErrUnavailable and names every library tried.
func NewDense(d *cuda.Device) (*Dense, error) {
	lib, err := cublaslt.Default()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	lt, err := lib.NewHandle(cudalink.Device(d))
	if err != nil {
		return nil, err
	}
	return &Dense{lt: lt}, nil
}

// Close releases the handle. Its plans must be destroyed first.
func (h *Dense) Close() error { return h.lt.Destroy() }

// Matrix is a column-major layout of Rows x Cols elements of Type,
// buffer.Float32 or buffer.BFloat16. Column j starts LD elements after
// column j-1. A row-major R x C matrix is a column-major C x R one.
//
// Batch above 1 makes a strided batch: matrix i starts i·Stride elements
// after the first. Stride may be smaller than LD·Cols, for interleaved
// matrices such as the heads of an attention layer side by side in one
// row-major activation. The matrices of D must not overlap. Every operand
// of a product has the same batch count.
//
// Align is the alignment in bytes of every address Run will pass for this
// operand: a power of two from the element size up to 256. 0 means 256.
// An operand at a smaller alignment must say so, or the library may pick a
// kernel that cannot read it.
type Matrix struct {
	Type       buffer.DType
	Rows, Cols int
	LD         int
	Batch      int
	Stride     int64
	Align      int
}

// layout returns m as cuBLASLt describes it.
func (m Matrix) layout() (cublaslt.Matrix, error) {
	var t cublaslt.DataType
	switch m.Type {
	case buffer.Float32:
		t = cublaslt.R32F
	case buffer.BFloat16:
		t = cublaslt.R16BF
	default:
		return cublaslt.Matrix{}, fmt.Errorf("%w: dense operand of type %v: want float32 or bfloat16", ErrShape, m.Type)
	}
	return cublaslt.Matrix{Type: t, Rows: m.Rows, Cols: m.Cols, LD: m.LD, Batch: m.Batch, Stride: m.Stride, Align: m.Align}, nil
}

// DenseSpec describes D = op(A)·op(B) for each matrix of a batch: op(A) is
// M x K, op(B) K x N, and D M x N float32, overwritten. TransA and TransB
// transpose A and B.
type DenseSpec struct {
	TransA, TransB bool
	A, B, D        Matrix
	// TF32 rounds float32 inputs to TF32, a relative error up to 2^-11
	// each, and multiplies them on the tensor cores: several times faster.
	// Otherwise float32 products are exact. Bfloat16 inputs always run on
	// the tensor cores. Sums are FP32.
	TF32 bool
}

// DensePlan is a product of Dense with the algorithm cuBLASLt chose.
type DensePlan struct {
	p *cublaslt.Plan
}

// Plan chooses cuBLASLt's algorithm for spec, with a workspace of at most
// maxWorkspace bytes. A product the library has no kernel for gives an
// error matching ErrShape: bfloat16 rows whose length is not a multiple of
// 8, say.
func (h *Dense) Plan(spec DenseSpec, maxWorkspace int) (*DensePlan, error) {
	a, errA := spec.A.layout()
	b, errB := spec.B.layout()
	d, errD := spec.D.layout()
	if err := errors.Join(errA, errB, errD); err != nil {
		return nil, err
	}
	op := map[bool]cublaslt.Op{false: cublaslt.OpN, true: cublaslt.OpT}
	s := cublaslt.Spec{TransA: op[spec.TransA], TransB: op[spec.TransB], A: a, B: b, C: d, D: d, Compute: cublaslt.Compute32F}
	if spec.TF32 {
		s.Compute = cublaslt.Compute32FFastTF32
	}
	p, err := h.lt.NewPlan(s, maxWorkspace, 0, 1)
	if errors.Is(err, cublaslt.ErrNotSupported) {
		return nil, fmt.Errorf("%w: %w", ErrShape, err)
	}
	if err != nil {
		return nil, err
	}
	return &DensePlan{p: p}, nil
}

// Workspace returns the bytes of workspace the plan's algorithm needs.
func (p *DensePlan) Workspace() int { return p.p.Workspace() }

// Run queues D = op(A)·op(B) on s, with the operands at a, b and d. ws
// holds wsSize bytes of workspace, at least Workspace().
func (p *DensePlan) Run(s *cuda.Stream, a, b, d, ws cuda.DevicePtr, wsSize int) error {
	return p.p.Run(cudalink.Stream(s), &cublaslt.Args{A: icuda.DevicePtr(a), B: icuda.DevicePtr(b), C: icuda.DevicePtr(d),
		D: icuda.DevicePtr(d), Alpha: 1, Workspace: icuda.DevicePtr(ws), WorkspaceSize: wsSize})
}

// Destroy releases the plan.
func (p *DensePlan) Destroy() error { return p.p.Destroy() }
