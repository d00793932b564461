package gpumodel

import (
	"errors"
	"fmt"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/gemm"
)

// headGEMMs are the tied head's three products under HeadBF16, on
// cuBLASLt's bfloat16 tensor cores with float32 sums, as PyTorch's
// autocast runs them: the logits (lnf·wteᵀ), the head input's gradient
// (dlogits·wte) and the head's part of the embedding's gradient
// (dlogitsᵀ·lnf), each written, not added. The plans are made for the
// alignment of the embedding's address, on its first use.
type headGEMMs struct {
	lt               *gemm.Dense
	n, h, v          int
	align            int // the embedding's alignment the plans were made for; 0 before
	logits, dx, dw   *gemm.DensePlan
	lnf16, dlogits16 cuda.DevicePtr // the bfloat16 head input and logits' gradient (Final: Forward writes them for Backward)
}

// allocHead makes m.head (HeadBF16): its bfloat16 buffers, kept from
// Forward to Backward (catFinal), and its cuBLASLt handle.
func (m *Model) allocHead(buf func(cat, bytes int) cuda.DevicePtr) error {
	n, h, v := m.rows, m.cfg.Hidden, m.cfg.Vocab
	g := &headGEMMs{n: n, h: h, v: v, lnf16: buf(catFinal, 2*n*h), dlogits16: buf(catFinal, 2*n*v)}
	lt, err := gemm.NewDense(m.k.Device())
	if err != nil {
		return fmt.Errorf("gpumodel: the bfloat16 head: %w", err)
	}
	g.lt, m.head = lt, g
	// Shapes cuBLASLt refuses fail here, not at the first Forward: plans
	// for an embedding at the allocator's alignment, remade at the first
	// Forward if the embedding is less aligned.
	return g.planFor(attnBaseAlign)
}

// headSpecs returns the specs of the three products for n rows of width
// h, a vocabulary of v and the embedding at an address aligned to align
// bytes. Row-major matrices are read as column-major transposes: the
// logits [n, v] are D = wte [v, h] (as h x v, transposed) · lnf [n, h]
// (as h x n); dln [n, h] is wte (h x v) · dlogits [n, v] (v x n); dwte
// [v, h] is lnf (h x n) · dlogits (v x n, transposed).
func headSpecs(n, h, v, align int) (logits, dx, dw gemm.DenseSpec) {
	m := func(t buffer.DType, rows, cols, al int) gemm.Matrix {
		return gemm.Matrix{Type: t, Rows: rows, Cols: cols, LD: rows, Batch: 1, Align: al}
	}
	wte, lnf, dlog := m(buffer.BFloat16, h, v, align), m(buffer.BFloat16, h, n, 0), m(buffer.BFloat16, v, n, 0)
	logits = gemm.DenseSpec{TransA: true, A: wte, B: lnf, D: m(buffer.Float32, v, n, 0)}
	dx = gemm.DenseSpec{A: wte, B: dlog, D: m(buffer.Float32, h, n, 0)}
	dw = gemm.DenseSpec{TransB: true, A: lnf, B: dlog, D: m(buffer.Float32, h, v, 0)}
	return logits, dx, dw
}

// plan makes the plans for an embedding at wte unless they exist for its
// alignment (alignOf, up to the 256 bytes of the allocator's).
func (g *headGEMMs) plan(wte cuda.DevicePtr) error { return g.planFor(alignOf(int(wte))) }

// planFor makes the plans for an embedding aligned to al bytes unless they
// exist for al.
func (g *headGEMMs) planFor(al int) error {
	if al == g.align {
		return nil
	}
	if err := g.destroyPlans(); err != nil {
		return err
	}
	specs := [3]gemm.DenseSpec{}
	specs[0], specs[1], specs[2] = headSpecs(g.n, g.h, g.v, al)
	for i, dst := range []**gemm.DensePlan{&g.logits, &g.dx, &g.dw} {
		p, err := g.lt.Plan(specs[i], 0)
		if err != nil {
			return fmt.Errorf("gpumodel: the bfloat16 head's products on cuBLASLt (rows %d, width %d, vocabulary %d; bfloat16 rows must be multiples of 8; HeadFP32 takes any): %w", g.n, g.h, g.v, err)
		}
		*dst = p
	}
	g.align = al
	return nil
}

// destroyPlans releases the plans.
func (g *headGEMMs) destroyPlans() error {
	var errs []error
	for _, p := range []**gemm.DensePlan{&g.logits, &g.dx, &g.dw} {
		if *p != nil {
			errs = append(errs, (*p).Destroy())
			*p = nil
		}
	}
	g.align = 0
	return errors.Join(errs...)
}

// close releases the plans and the handle.
func (g *headGEMMs) close() error {
	return errors.Join(g.destroyPlans(), g.lt.Close())
}
