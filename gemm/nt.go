package gemm

import (
	"fmt"

	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/internal/cublaslt"
	icuda "github.com/distopt/distopt/internal/cuda"
)

// side is one input of a product as cuBLASLt reads it: a row-major matrix
// [outer, k] with k contiguous ("K-major"), or for bfloat16 inputs also
// [k, outer] (kMajor false), with its scales.
type side struct {
	data     icuda.DevicePtr
	outer, k int
	kMajor   bool
	typ      cublaslt.DataType
	mode     cublaslt.ScaleMode
	scale    icuda.DevicePtr
}

func fp8Type(f fp8.Format) cublaslt.DataType {
	if f == fp8.E5M2 {
		return cublaslt.R8FE5M2
	}
	return cublaslt.R8FE4M3
}

// nt queues out[P, Q] (row-major) = l[P, K] · r[Q, K]ᵀ (+ out when
// accumulating): with cuBLASLt's column-major view, D (Q x P) = op(A)·op(B)
// with A = r and B = l. FP8 inputs are read TN (both K-major), the only
// form Hopper's FP8 kernels take.
func (e *Engine) nt(out Output, l, r side) error {
	e.mark(StageGEMM)
	ot, err := outType(out.Type)
	if err != nil {
		return err
	}
	p, q, k := l.outer, r.outer, l.k
	spec := cublaslt.Spec{
		C: cublaslt.Matrix{Type: ot, Rows: q, Cols: p, LD: q},
		D: cublaslt.Matrix{Type: ot, Rows: q, Cols: p, LD: q},
	}
	if r.kMajor {
		spec.TransA, spec.A = cublaslt.OpT, cublaslt.Matrix{Type: r.typ, Rows: k, Cols: q, LD: k}
	} else {
		spec.TransA, spec.A = cublaslt.OpN, cublaslt.Matrix{Type: r.typ, Rows: q, Cols: k, LD: q}
	}
	if l.kMajor {
		spec.TransB, spec.B = cublaslt.OpN, cublaslt.Matrix{Type: l.typ, Rows: k, Cols: p, LD: k}
	} else {
		spec.TransB, spec.B = cublaslt.OpT, cublaslt.Matrix{Type: l.typ, Rows: p, Cols: k, LD: p}
	}
	spec.AScaleMode, spec.BScaleMode = r.mode, l.mode
	if out.Bias != 0 {
		spec.Epilogue, spec.BiasType, spec.BiasAlign = cublaslt.EpilogueBias, cublaslt.R16BF, out.biasAlign()
	}
	pl, err := e.plan(spec)
	if err != nil && out.Bias != 0 {
		return fmt.Errorf("%w: [%d x %d] · [%d x %d]ᵀ (%v by %v) with a bfloat16 bias in cuBLASLt's epilogue (CUBLASLT_EPILOGUE_BIAS, bias %d-byte aligned), %v output: %w",
			ErrEpilogue, p, k, q, k, l.typ, r.typ, out.biasAlign(), out.Type, err)
	}
	if err != nil {
		return fmt.Errorf("gemm: [%d x %d] · [%d x %d]ᵀ: %w", p, k, q, k, err)
	}
	beta := float32(0)
	if out.Accumulate {
		beta = 1
	}
	args := &cublaslt.Args{A: r.data, B: l.data, C: icuda.DevicePtr(out.Data), D: icuda.DevicePtr(out.Data), AScale: r.scale,
		BScale: l.scale, Bias: icuda.DevicePtr(out.Bias), Alpha: 1, Beta: beta, Workspace: e.ws, WorkspaceSize: WorkspaceBytes}
	if e.tune > 1 && !out.Accumulate && !e.tuned[spec] {
		e.tuned[spec] = true
		if err := e.autotune(pl, args); err != nil {
			return err
		}
	}
	return pl.Run(e.s, args)
}

// pairOK reports whether cuBLASLt's Hopper kernels take the two scale
// layouts together: both per tensor, or block scales on both with at most
// one of them 128x128 tiles.
func pairOK(a, b Layout) bool {
	if a == PerTensor || b == PerTensor {
		return a == b
	}
	return !(a == Tiles128 && b == Tiles128)
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// gridLD is the row pitch cuBLASLt reads a 128x128 tile grid with: the K
// blocks of a row, rounded up to a multiple of 4.
func gridLD(k int) int { return (ceilDiv(k, 128) + 3) / 4 * 4 }

// scaleAlign is the alignment cuBLASLt's FP8 kernels need of a scale
// pointer: the GPU run of 2026-12-01 saw a scalar scale at a 4-byte offset
// refused by cublasLtMatmul (CUBLAS_STATUS_NOT_SUPPORTED). The optimizer's
// per-tensor scale_inv values lie 4 bytes apart, so most weights' are
// copied (4 bytes) into aligned scratch.
const scaleAlign = 16

// scaleCopy says how kmajor hands o's scales to cuBLASLt: regrid (the tile
// grid rewritten: transposed, or its rows padded to 4 tiles), copy (moved
// as they are to an aligned address), or neither (read in place).
func scaleCopy(o Operand, direct bool, k int) (regrid, copy bool) {
	aligned := uint64(o.ScaleInv)%scaleAlign == 0
	if o.Scales == Tiles128 {
		return !direct || ceilDiv(k, 128)%4 != 0 || !aligned, false
	}
	return false, !aligned
}

// sideNeed returns the scratch bytes kmajor needs to present o with k its
// contiguous dimension (kIsCols: k = o.Cols).
func sideNeed(o Operand, kIsCols bool) int {
	direct := kIsCols != o.Transposed
	rows, cols := o.stored()
	outer, k := rows, cols
	if !direct {
		outer, k = cols, rows
	}
	n := 0
	if !direct {
		n += alignUp(outer * k)
	}
	switch regrid, copy := scaleCopy(o, direct, k); {
	case regrid:
		n += alignUp(4 * ceilDiv(outer, 128) * gridLD(k))
	case copy:
		n += alignUp(ScaleBytes(rows, cols, o.Scales))
	}
	return n
}

// kmajor presents o to the tensor cores as a K-major matrix whose
// contiguous dimension is o's Cols (kIsCols) or Rows: in place when the
// bytes already lie so, else through an exact transpose into scratch
// (bytes, and the tile grid for Tiles128). 1x128 row blocks cannot be
// transposed exactly and give ErrLayout.
func (e *Engine) kmajor(a *arena, o Operand, kIsCols bool) (side, error) {
	direct := kIsCols != o.Transposed
	rows, cols := o.stored()
	sd := side{data: icuda.DevicePtr(o.Data), outer: rows, k: cols, kMajor: true, typ: fp8Type(o.Format), scale: icuda.DevicePtr(o.ScaleInv)}
	switch o.Scales {
	case PerTensor:
		sd.mode = cublaslt.ScaleScalar32F
	case Rows128:
		sd.mode = cublaslt.ScaleVec128F32
	case Tiles128:
		sd.mode = cublaslt.ScaleBlk128x128F32
	default:
		return side{}, fmt.Errorf("%w: %v operand on the tensor cores", ErrLayout, o.Scales)
	}
	if !direct {
		if o.Scales == Rows128 {
			return side{}, fmt.Errorf("%w: operand %v would need a transpose, which 1x128 blocks do not survive: quantize it into an operand stored Transposed", ErrLayout, o)
		}
		sd.data, sd.outer, sd.k = a.take(rows*cols), cols, rows
		e.mark(StageTranspose)
		if err := e.k.TransposeFP8(e.s, sd.data, icuda.DevicePtr(o.Data), rows, cols); err != nil {
			return side{}, err
		}
	}
	regrid, copy := scaleCopy(o, direct, sd.k)
	if regrid || copy {
		e.mark(StageTranspose)
	}
	switch {
	case regrid:
		ld := gridLD(sd.k)
		sd.scale = a.take(4 * ceilDiv(sd.outer, 128) * ld)
		err := e.k.CopyScaleGrid(e.s, sd.scale, ld, icuda.DevicePtr(o.ScaleInv), ceilDiv(cols, 128), ceilDiv(rows, 128), ceilDiv(cols, 128), !direct)
		if err != nil {
			return side{}, err
		}
	case copy:
		n := ScaleBytes(rows, cols, o.Scales)
		sd.scale = a.take(n)
		if err := e.s.CopyDtoD(sd.scale, icuda.DevicePtr(o.ScaleInv), n); err != nil {
			return side{}, err
		}
	}
	return sd, nil
}
