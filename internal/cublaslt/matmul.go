package cublaslt

import (
	"fmt"

	"github.com/distopt/distopt/internal/cuda"
)

// Handle is a cuBLASLt context bound to one device. Its methods run on the
// device's worker thread; a Handle may be shared, a Plan may not.
type Handle struct {
	l *Library
	d *cuda.Device
	h uintptr
}

// NewHandle creates a handle for d (cublasLtCreate).
func (l *Library) NewHandle(d *cuda.Device) (*Handle, error) {
	h := &Handle{l: l, d: d}
	err := d.Do(func() error {
		var s Status
		h.h, s = l.fns.create()
		return check("cublasLtCreate", s)
	})
	if err != nil {
		return nil, err
	}
	return h, nil
}

// Library returns the library the handle belongs to.
func (h *Handle) Library() *Library { return h.l }

// Device returns the handle's device.
func (h *Handle) Device() *cuda.Device { return h.d }

// Destroy releases the handle. Plans made from it must be destroyed first.
func (h *Handle) Destroy() error {
	return h.d.Do(func() error { return check("cublasLtDestroy", h.l.fns.destroy(h.h)) })
}

// Matrix is a column-major matrix layout: Rows x Cols elements of Type,
// column j starting LD elements after column j-1. Batch above 1 makes a
// strided batch (CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT and _STRIDED_BATCH_OFFSET):
// matrix i starts i·Stride elements after the first. Stride may be below
// LD·Cols, for interleaved matrices, but the matrices of D must not overlap.
// Batch 0 and 1 both mean one matrix. Every operand of a spec has the same
// batch count.
//
// Align, if not 0, is the alignment in bytes of the first matrix's address,
// and of every matrix's when Stride·size is a multiple of it. It is a power
// of two from the element size up to 256. 0 means 256, the library's
// assumption. A less aligned operand must say so, or the heuristic may pick a
// kernel that cannot read it.
type Matrix struct {
	Type       DataType
	Rows, Cols int
	LD         int
	Batch      int
	Stride     int64
	Align      int
}

func (m Matrix) String() string {
	s := fmt.Sprintf("%dx%d ld=%d type=%d", m.Rows, m.Cols, m.LD, m.Type)
	if m.Batch > 1 {
		s += fmt.Sprintf(" batch=%d stride=%d", m.Batch, m.Stride)
	}
	if m.Align != 0 {
		s += fmt.Sprintf(" align=%d", m.Align)
	}
	return s
}

func (m Matrix) batch() int { return max(m.Batch, 1) }

// Spec describes D = alpha * scaleA*scaleB * op(A)·op(B) + beta * C, with
// op(A) M x K, op(B) K x N, C and D M x N (for each matrix of a batch).
// FP8 operands on Hopper need TransA = OpT and TransB = OpN (both
// K-contiguous).
type Spec struct {
	TransA, TransB Op
	A, B, C, D     Matrix
	// Compute is the compute type; 0 means Compute32F. With FP32 operands,
	// Compute32FFastTF32 trades input precision for tensor-core speed.
	Compute                ComputeType
	AScaleMode, BScaleMode ScaleMode // for FP8 operands
	// FastAccum lets FP8 kernels accumulate in the tensor cores' reduced
	// precision (CUBLASLT_MATMUL_DESC_FAST_ACCUM). Off by default.
	FastAccum bool
	// Epilogue is CUBLASLT_MATMUL_DESC_EPILOGUE; 0 leaves it unset
	// (EpilogueDefault). With EpilogueBias every Run takes Args.Bias, a
	// vector of D.Rows elements of BiasType.
	Epilogue Epilogue
	// BiasType is CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, set with
	// EpilogueBias only (0 is R32F). cuBLASLt's FP8 kernels with a
	// bfloat16 or float32 D take R16BF.
	BiasType DataType
	// BiasAlign is the alignment in bytes of every Args.Bias the plan runs
	// with: a power of two from BiasType's size up to 256; 0 means 256.
	// The heuristic reads the alignment from the bias pointer it is given
	// (cuBLASLt's documentation of CUBLASLT_MATMUL_DESC_BIAS_POINTER), so
	// NewPlan gives it an address of exactly this alignment, and Run
	// refuses a less aligned bias.
	BiasAlign int
}

func (s Spec) String() string {
	e := ""
	if s.Epilogue != 0 {
		e = fmt.Sprintf(" epilogue %d bias type %d align %d", s.Epilogue, s.BiasType, s.biasAlign())
	}
	return fmt.Sprintf("op(A)=%d A[%v] op(B)=%d B[%v] C[%v] D[%v] compute %d scale modes %d/%d%s", s.TransA, s.A, s.TransB, s.B, s.C, s.D, s.compute(), s.AScaleMode, s.BScaleMode, e)
}

// biasAlign returns BiasAlign, 256 when 0.
func (s Spec) biasAlign() int {
	if s.BiasAlign == 0 {
		return 256
	}
	return s.BiasAlign
}

func (s Spec) compute() ComputeType {
	if s.Compute == 0 {
		return Compute32F
	}
	return s.Compute
}

// validate checks what cuBLASLt would reject with a bare status code: batch
// counts that differ, negative batch counts or strides, alignments that are
// not powers of two up to 256.
func (s Spec) validate() error {
	for i, m := range []Matrix{s.A, s.B, s.C, s.D} {
		name := "ABCD"[i : i+1]
		if m.Batch < 0 || m.Stride < 0 || m.batch() != s.A.batch() {
			return &Error{Op: "cublasLtMatrixLayoutSetAttribute", Status: StatusInvalidValue,
				Detail: fmt.Sprintf("%s: batch %d stride %d (A's batch %d): counts must match, neither negative", name, m.Batch, m.Stride, s.A.batch())}
		}
		if m.Align != 0 && (m.Align&(m.Align-1) != 0 || m.Align < m.Type.Size() || m.Align > 256) {
			return &Error{Op: "cublasLtMatmulPreferenceSetAttribute", Status: StatusInvalidValue,
				Detail: fmt.Sprintf("%s: alignment %d bytes: want a power of two from %d to 256", name, m.Align, m.Type.Size())}
		}
	}
	return s.validateEpilogue()
}

// validateEpilogue checks the epilogue fields: an epilogue this package
// sets (EpilogueDefault, EpilogueBias), and with a bias an alignment that
// is a power of two from the bias type's size up to 256.
func (s Spec) validateEpilogue() error {
	bad := func(detail string) error {
		return &Error{Op: "cublasLtMatmulDescSetAttribute", Status: StatusInvalidValue, Detail: detail}
	}
	switch s.Epilogue {
	case 0, EpilogueDefault:
		if s.BiasType != 0 || s.BiasAlign != 0 {
			return bad(fmt.Sprintf("bias type %d, alignment %d without EpilogueBias", s.BiasType, s.BiasAlign))
		}
	case EpilogueBias:
		if a := s.biasAlign(); a&(a-1) != 0 || a < s.BiasType.Size() || a > 256 {
			return bad(fmt.Sprintf("bias alignment %d bytes: want a power of two from %d to 256", a, s.BiasType.Size()))
		}
	default:
		return bad(fmt.Sprintf("epilogue %d: this package sets EpilogueDefault or EpilogueBias", s.Epilogue))
	}
	return nil
}

// biasHint returns an address of exactly the spec's bias alignment, for
// the heuristic to read it from: the 256-byte aligned base (a device
// address when it is not 0) plus the alignment, below 256.
func (s Spec) biasHint(base cuda.DevicePtr) uint64 {
	b := uint64(base) &^ 255
	if b == 0 {
		b = 256
	}
	return b + uint64(s.biasAlign()%256)
}

// Algo is one algorithm the heuristic proposed, with the workspace it needs.
type Algo struct {
	data      [8]uint64
	Workspace int     // bytes of workspace the algorithm needs
	Waves     float32 // the heuristic's waves count (informational)
}

// Plan is a matmul descriptor, four layouts and the algorithm the heuristic
// chose. Its scale pointers are set by each Run, so a Plan must not be run
// from two goroutines at once.
type Plan struct {
	h                *Handle
	spec             Spec
	desc, a, b, c, d uintptr
	algo             Algo
	algos            []Algo // the heuristic's candidates, best first
	fp8              bool
}

// NewPlan creates the descriptors of spec and asks the heuristic for the
// best algorithm whose workspace fits maxWorkspace bytes (keeping up to
// candidates of its proposals for Use; at least 1). For FP8 specs,
// scaleHint is a device address set as both scale pointers while the
// heuristic runs (it refuses block scale modes without one; Run sets the
// real ones). A combination the library has no kernel for gives an error
// matching ErrNotSupported or ErrInvalid that names the spec.
func (h *Handle) NewPlan(spec Spec, maxWorkspace int, scaleHint cuda.DevicePtr, candidates int) (*Plan, error) {
	p := &Plan{h: h, spec: spec, fp8: isFP8(spec.A.Type) || isFP8(spec.B.Type)}
	if err := spec.validate(); err != nil {
		return nil, err
	}
	err := h.d.Do(func() error {
		if err := p.create(maxWorkspace, scaleHint, max(candidates, 1)); err != nil {
			p.release()
			return err
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w [%v]", err, spec)
	}
	return p, nil
}

func isFP8(t DataType) bool { return t == R8FE4M3 || t == R8FE5M2 }

// create builds the descriptors and picks the algorithm; on the worker.
func (p *Plan) create(maxWorkspace int, scaleHint cuda.DevicePtr, candidates int) error {
	f, s := p.h.l.fns, p.spec
	var st Status
	if p.desc, st = f.descCreate(s.compute(), R32F); st != StatusSuccess {
		return check("cublasLtMatmulDescCreate", st)
	}
	sets := []struct {
		a descAttr
		v int32
	}{{descTransA, int32(s.TransA)}, {descTransB, int32(s.TransB)}}
	if p.fp8 {
		sets = append(sets, struct {
			a descAttr
			v int32
		}{descAScaleMode, int32(s.AScaleMode)}, struct {
			a descAttr
			v int32
		}{descBScaleMode, int32(s.BScaleMode)})
	}
	for _, a := range sets {
		if err := check("cublasLtMatmulDescSetAttribute", f.descSetI32(p.desc, a.a, a.v)); err != nil {
			return fmt.Errorf("%w: attribute %d = %d", err, a.a, a.v)
		}
	}
	if p.fp8 {
		for _, a := range []descAttr{descAScalePtr, descBScalePtr} {
			if err := check("cublasLtMatmulDescSetAttribute", f.descSetPtr(p.desc, a, uint64(scaleHint))); err != nil {
				return err
			}
		}
	}
	if s.FastAccum {
		if err := check("cublasLtMatmulDescSetAttribute", f.descSetI8(p.desc, descFastAccum, 1)); err != nil {
			return err
		}
	}
	if err := p.setEpilogue(scaleHint); err != nil {
		return err
	}
	for _, m := range []struct {
		dst *uintptr
		m   Matrix
	}{{&p.a, s.A}, {&p.b, s.B}, {&p.c, s.C}, {&p.d, s.D}} {
		if *m.dst, st = f.layoutCreate(m.m.Type, uint64(m.m.Rows), uint64(m.m.Cols), int64(m.m.LD)); st != StatusSuccess {
			return fmt.Errorf("%w: layout %v", check("cublasLtMatrixLayoutCreate", st), m.m)
		}
		if m.m.Batch > 1 {
			if st = f.layoutBatch(*m.dst, int32(m.m.Batch), m.m.Stride); st != StatusSuccess {
				return fmt.Errorf("%w: layout %v", check("cublasLtMatrixLayoutSetAttribute", st), m.m)
			}
		}
	}
	align := [4]uint32{uint32(s.A.Align), uint32(s.B.Align), uint32(s.C.Align), uint32(s.D.Align)}
	pref, st := f.prefCreate(uint64(maxWorkspace), align)
	if pref != 0 {
		// Also when an attribute was refused: the preference exists then.
		defer f.prefDestroy(pref)
	}
	if st != StatusSuccess {
		return check("cublasLtMatmulPreferenceCreate", st)
	}
	algos, st := f.heuristic(p.h.h, p.desc, p.a, p.b, p.c, p.d, pref, candidates)
	if st != StatusSuccess {
		return check("cublasLtMatmulAlgoGetHeuristic", st)
	}
	if len(algos) == 0 {
		return &Error{Op: "cublasLtMatmulAlgoGetHeuristic", Status: StatusNotSupported, Detail: "no algorithm"}
	}
	p.algo, p.algos = algos[0], algos
	return nil
}

// setEpilogue sets the spec's epilogue attributes, with a bias pointer of
// the spec's alignment at scaleHint's page for the heuristic; on the
// worker.
func (p *Plan) setEpilogue(scaleHint cuda.DevicePtr) error {
	f, s := p.h.l.fns, p.spec
	if s.Epilogue == 0 {
		return nil
	}
	// The attribute is a uint32; its four bytes are those of the int32.
	if err := check("cublasLtMatmulDescSetAttribute", f.descSetI32(p.desc, descEpilogue, int32(s.Epilogue))); err != nil {
		return fmt.Errorf("%w: epilogue %d", err, s.Epilogue)
	}
	if s.Epilogue != EpilogueBias {
		return nil
	}
	if err := check("cublasLtMatmulDescSetAttribute", f.descSetI32(p.desc, descBiasType, int32(s.BiasType))); err != nil {
		return fmt.Errorf("%w: bias type %d", err, s.BiasType)
	}
	return check("cublasLtMatmulDescSetAttribute", f.descSetPtr(p.desc, descBiasPtr, s.biasHint(scaleHint)))
}

// Candidates returns how many algorithms the heuristic proposed (at most
// the candidates NewPlan was given).
func (p *Plan) Candidates() int { return len(p.algos) }

// Use makes candidate i (0 is the heuristic's first choice) the algorithm
// of later runs.
func (p *Plan) Use(i int) { p.algo = p.algos[i] }

// release destroys whatever create made; on the worker.
func (p *Plan) release() {
	f := p.h.l.fns
	for _, l := range []*uintptr{&p.a, &p.b, &p.c, &p.d} {
		if *l != 0 {
			f.layoutDestroy(*l)
			*l = 0
		}
	}
	if p.desc != 0 {
		f.descDestroy(p.desc)
		p.desc = 0
	}
}

// Spec returns the plan's spec.
func (p *Plan) Spec() Spec { return p.spec }

// Workspace returns the bytes of workspace the chosen algorithm needs.
func (p *Plan) Workspace() int { return p.algo.Workspace }

// Args are the operands of one Run: device addresses of A, B, C, D, the
// FP8 scale tensors of A and B (ignored for non-FP8 plans), the bias
// vector of an EpilogueBias plan (ignored by others), the host scalars
// alpha and beta, and the workspace.
type Args struct {
	A, B, C, D     cuda.DevicePtr
	AScale, BScale cuda.DevicePtr
	Bias           cuda.DevicePtr
	Alpha, Beta    float32
	Workspace      cuda.DevicePtr
	WorkspaceSize  int
}

// Run queues the matmul on s. The workspace must hold at least Workspace()
// bytes.
func (p *Plan) Run(s *cuda.Stream, a *Args) error {
	if a.WorkspaceSize < p.algo.Workspace {
		panic(fmt.Sprintf("cublaslt: workspace of %d bytes, the algorithm needs %d", a.WorkspaceSize, p.algo.Workspace))
	}
	if err := p.checkBias(a.Bias); err != nil {
		return err
	}
	f := p.h.l.fns
	return p.h.d.Do(func() error {
		if p.spec.Epilogue == EpilogueBias {
			if err := check("cublasLtMatmulDescSetAttribute", f.descSetPtr(p.desc, descBiasPtr, uint64(a.Bias))); err != nil {
				return err
			}
		}
		if p.fp8 {
			if err := check("cublasLtMatmulDescSetAttribute", f.descSetPtr(p.desc, descAScalePtr, uint64(a.AScale))); err != nil {
				return err
			}
			if err := check("cublasLtMatmulDescSetAttribute", f.descSetPtr(p.desc, descBScalePtr, uint64(a.BScale))); err != nil {
				return err
			}
		}
		st := f.matmul(p.h.h, p.desc, a.Alpha, uintptr(a.A), p.a, uintptr(a.B), p.b, a.Beta, uintptr(a.C), p.c,
			uintptr(a.D), p.d, &p.algo, uintptr(a.Workspace), a.WorkspaceSize, s.Handle())
		if err := check("cublasLtMatmul", st); err != nil {
			err.(*Error).Detail = p.spec.String()
			return err
		}
		return nil
	})
}

// checkBias refuses, for an EpilogueBias plan, a null bias or one less
// aligned than the plan's BiasAlign (its kernel may assume the alignment).
func (p *Plan) checkBias(b cuda.DevicePtr) error {
	if p.spec.Epilogue != EpilogueBias {
		return nil
	}
	if a := p.spec.biasAlign(); b == 0 || uint64(b)%uint64(a) != 0 {
		return &Error{Op: "cublasLtMatmul", Status: StatusInvalidValue,
			Detail: fmt.Sprintf("bias at %#x: want a non-null address aligned to %d bytes [%v]", uint64(b), a, p.spec)}
	}
	return nil
}

// Destroy releases the plan's descriptors.
func (p *Plan) Destroy() error {
	return p.h.d.Do(func() error {
		p.release()
		return nil
	})
}
