package fp8

import "fmt"

// Tensor is an FP8 tensor: the codes, the shape, and the scales needed to
// read it back.
type Tensor struct {
	// Data holds one code per element, row-major.
	Data []byte
	// Shape is the logical shape; the product of its dimensions is
	// len(Data) (1 for an empty shape).
	Shape  []int
	Format Format
	Recipe Recipe
	// ScaleInv holds the factors the decoded codes are multiplied by: one
	// value for the per-tensor recipes; one per block (Block1x128, MXFP8)
	// or per tile (Block128x128) in the order of Recipe.NumScales.
	ScaleInv []float32
	// ScaleE8M0 holds the E8M0 scale codes of MXFP8 (nil otherwise);
	// ScaleInv[k] is then E8M0Value(ScaleE8M0[k]).
	ScaleE8M0 []byte
}

// Dequantize writes the value of every element to dst: f.Decode(code) *
// scaleInv as a float32 multiply, scaleInv being the scale of the element's
// tensor, block or tile. It returns an error wrapping ErrShape if dst,
// Data, Shape and ScaleInv disagree, or ErrRecipe if the recipe is invalid.
func (t *Tensor) Dequantize(dst []float32) error {
	if err := t.Recipe.Validate(); err != nil {
		return err
	}
	n := len(t.Data)
	if err := checkShape(t.Shape, n); err != nil {
		return err
	}
	if len(dst) != n || len(t.ScaleInv) != t.Recipe.NumScales(t.Shape) || t.Format != t.Recipe.Format {
		return fmt.Errorf("%w: %d values, %d codes, %d scales (want %d), format %v, recipe %v",
			ErrShape, len(dst), n, len(t.ScaleInv), t.Recipe.NumScales(t.Shape), t.Format, t.Recipe)
	}
	switch t.Recipe.Scaling {
	case TensorCurrent, TensorDelayed:
		Dequantize(dst, t.Data, t.ScaleInv[0], t.Format)
	case Block1x128, MXFP8:
		_, block := t.Recipe.Block()
		for k, inv := range t.ScaleInv {
			lo, hi := k*block, min((k+1)*block, n)
			Dequantize(dst[lo:hi], t.Data[lo:hi], inv, t.Format)
		}
	case Block128x128:
		_, cols := Matrix(t.Shape)
		forEachTileRun(n, 0, cols, 128, func(k, lo, hi int) {
			Dequantize(dst[lo:hi], t.Data[lo:hi], t.ScaleInv[k], t.Format)
		})
	}
	return nil
}

// Quantize casts a whole tensor with recipe r; it is the reference the
// sharded, distributed cast must reproduce bit for bit:
//
//   - TensorCurrent: scale from ScaleFromAmax(Amax(src)), then CastScaled.
//   - TensorDelayed: scale from h.Scale (the history before this cast), then
//     CastScaled, then h.Push of the cast's amax (see AmaxHistory).
//   - Block1x128: CastBlocks1D with block 128 over the flattened tensor.
//   - Block128x128: TileAmax, ScaleFromAmax per tile, then CastTiles, with
//     the shape viewed as a matrix by Matrix.
//   - MXFP8: CastMX over the flattened tensor.
//
// h is used only by TensorDelayed, where it must not be nil. Errors wrap
// ErrRecipe (invalid r), ErrShape (len(src) is not the product of shape, or
// a negative dimension) or ErrHistory.
func Quantize(src []float32, shape []int, r Recipe, h *AmaxHistory) (*Tensor, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	if err := checkShape(shape, len(src)); err != nil {
		return nil, err
	}
	if r.Scaling == TensorDelayed && h == nil {
		return nil, ErrHistory
	}
	f := r.Format
	t := &Tensor{
		Data:     make([]byte, len(src)),
		Shape:    append([]int(nil), shape...),
		Format:   f,
		Recipe:   r,
		ScaleInv: make([]float32, r.NumScales(shape)),
	}
	switch r.Scaling {
	case TensorCurrent:
		scale, inv := ScaleFromAmax(Amax(src), f, r.Margin, r.PowerOf2)
		CastScaled(t.Data, src, scale, f)
		t.ScaleInv[0] = inv
	case TensorDelayed:
		scale, inv := h.Scale(f, r.Margin, r.PowerOf2)
		h.Push(CastScaled(t.Data, src, scale, f))
		t.ScaleInv[0] = inv
	case Block1x128:
		CastBlocks1D(t.Data, t.ScaleInv, src, 128, f, r.Margin, r.PowerOf2)
	case Block128x128:
		_, cols := Matrix(shape)
		amax := make([]float32, len(t.ScaleInv))
		TileAmax(amax, src, 0, cols, 128)
		scale := make([]float32, len(amax))
		for k, a := range amax {
			scale[k], t.ScaleInv[k] = ScaleFromAmax(a, f, r.Margin, r.PowerOf2)
		}
		CastTiles(t.Data, src, 0, cols, 128, scale, f)
	case MXFP8:
		t.ScaleE8M0 = make([]byte, len(t.ScaleInv))
		CastMX(t.Data, t.ScaleE8M0, src, f)
		for k, e := range t.ScaleE8M0 {
			t.ScaleInv[k] = E8M0Value(e)
		}
	}
	return t, nil
}

// checkShape returns an error wrapping ErrShape unless every dimension is
// non-negative and their product is n.
func checkShape(shape []int, n int) error {
	for _, d := range shape {
		if d < 0 {
			return fmt.Errorf("%w: negative dimension in %v", ErrShape, shape)
		}
	}
	if numElements(shape) != n {
		return fmt.Errorf("%w: shape %v has %d elements, data %d", ErrShape, shape, numElements(shape), n)
	}
	return nil
}
