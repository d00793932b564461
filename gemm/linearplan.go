package gemm

// LinearMemory is what a Linear costs in device memory at a token count.
type LinearMemory struct {
	// Kept: the bytes held from Forward to Backward, the FP8 input and its
	// scales (tokens*in + scales), with KeepTransposed also its transpose
	// (twice that), with Recompute none.
	Kept int
	// BF16: what keeping the input in bfloat16 would hold, 2*tokens*in.
	BF16 int
	// Transient: the bytes of the engine's activation buffer one Forward or
	// Backward uses (ActivationScratch), shared by every layer.
	Transient int
	// Products: the largest scratch one of the layer's three products
	// uses (Scratch, PeakScratch), shared by every layer; an upper bound
	// (a weight's scale_inv taken as not 16-byte aligned).
	Products int
}

// PlanLinear returns the memory of a Linear of configuration c over tokens
// rows with weights of layout w, as KeptBytes, ActivationScratch and
// PeakScratch report it after a Forward and Backward. Per layer only Kept
// stays between Forward and Backward; Transient and Products are buffers
// of the engine, sized by the largest layer.
func PlanLinear(c LinearConfig, tokens int, w Layout) (LinearMemory, error) {
	if err := c.validate(); err != nil {
		return LinearMemory{}, err
	}
	lay := c.layout()
	m := LinearMemory{Kept: tokens*c.In + ScaleBytes(tokens, c.In, lay), BF16: 2 * tokens * c.In}
	if c.Recompute {
		m.Kept = 0
	}
	if c.KeepTransposed {
		m.Kept += tokens*c.In + ScaleBytes(c.In, tokens, lay)
	}
	f, b := &arena{}, &arena{}
	c.forwardScratch(f, tokens)
	t := c.backwardScratch(b, tokens)
	m.Transient = max(f.off, b.off)

	const unaligned = 4 // the optimizer's per-tensor scales lie 4 bytes apart
	wo := Operand{Rows: c.Out, Cols: c.In, Format: c.X.Format, Scales: w, ScaleInv: unaligned}
	x := Operand{Rows: tokens, Cols: c.In, Format: c.X.Format, Scales: lay}
	xT, dyT := x, t.dy
	xT.Transposed = lay == Rows128 || c.KeepTransposed // per tensor and transient: WGrad transposes x
	if lay == Rows128 || c.CallerCastsDY {
		dyT = t.dyT
	}
	m.Products = max(Scratch(ForwardProduct, x, wo), Scratch(DGradProduct, t.dy, wo), Scratch(WGradProduct, dyT, xT))
	return m, nil
}
