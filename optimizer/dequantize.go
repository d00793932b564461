package optimizer

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/fp8"
)

// WeightsInto writes the named parameter as the model sees it into dst, one
// float32 per element in row-major order: the same values as Weights, bit
// for bit (FP8 codes decoded and multiplied by their scale_inv as a float32
// multiply; high-precision copies widened exactly). It is the hand-over to
// a framework that owns its weight buffers: dst is the framework's own
// memory, and when the backend's buffers are in host memory (the CPU
// backend) nothing is allocated or copied on the way. With device buffers
// the bytes are first read to the host. len(dst) must be the parameter's
// number of elements (ErrConfig otherwise); an unknown name is
// ErrUnknownParam.
func (o *Optimizer) WeightsInto(dst []float32, name string) error {
	return o.weightsInto(dst, name, false)
}

// WeightsIntoTransposed is WeightsInto for a framework that stores the
// parameter transposed: with the shape viewed as a rows x cols matrix
// (fp8.Matrix), element (r, c) is written to dst[c*rows+r]. Block and tile
// scales are those of the optimizer's own row-major view, so a 1x128 block
// runs along the optimizer's last axis, which is dst's first.
func (o *Optimizer) WeightsIntoTransposed(dst []float32, name string) error {
	return o.weightsInto(dst, name, true)
}

func (o *Optimizer) weightsInto(dst []float32, name string, transpose bool) error {
	v, err := o.Param(name)
	if err != nil {
		return err
	}
	rows, cols := fp8.Matrix(v.Shape)
	n := rows * cols
	if len(dst) != n {
		return fmt.Errorf("optimizer: destination of %q holds %d values, the parameter %d: %w", name, len(dst), n, ErrConfig)
	}
	data, err := o.hostBytes(v.Data)
	if err != nil {
		return err
	}
	put := func(k int, x float32) { dst[k] = x }
	if transpose {
		put = func(k int, x float32) { dst[k%cols*rows+k/cols] = x }
	}
	if v.HighPrecision {
		for k := range n {
			if v.DType == buffer.Float32 {
				put(k, math.Float32frombits(binary.LittleEndian.Uint32(data[4*k:])))
			} else {
				put(k, fp8.Float32FromBF16(binary.LittleEndian.Uint16(data[2*k:])))
			}
		}
		return nil
	}
	raw, err := o.hostBytes(v.ScaleInv)
	if err != nil {
		return err
	}
	inv := func(s int) float32 {
		if v.Recipe.Scaling == fp8.MXFP8 {
			return fp8.E8M0Value(raw[s])
		}
		return math.Float32frombits(binary.LittleEndian.Uint32(raw[4*s:]))
	}
	if !transpose {
		scaleRuns(v.Recipe, rows, cols, func(lo, hi, s int) {
			fp8.Dequantize(dst[lo:hi], data[lo:hi], inv(s), v.Format)
		})
		return nil
	}
	// Transposed: walk 32x32 tiles so that reads and writes both stay in
	// cache; element k's scale index comes from the same rules as scaleRuns.
	var table [256]float32
	for b := range table {
		table[b] = v.Format.Decode(uint8(b))
	}
	index := scaleIndex(v.Recipe, cols)
	perTensor := v.Recipe.NumScales(v.Shape) == 1
	f := inv(0)
	const tile = 32
	for r0 := 0; r0 < rows; r0 += tile {
		for c0 := 0; c0 < cols; c0 += tile {
			for r := r0; r < min(r0+tile, rows); r++ {
				for c := c0; c < min(c0+tile, cols); c++ {
					k := r*cols + c
					if !perTensor {
						f = inv(index(k))
					}
					dst[c*rows+r] = table[data[k]] * f
				}
			}
		}
	}
	return nil
}

// scaleIndex returns the function giving the scale index of flat element k
// of a parameter with cols columns under recipe r (the s of scaleRuns).
func scaleIndex(r fp8.Recipe, cols int) func(k int) int {
	switch r.Scaling {
	case fp8.Block1x128, fp8.MXFP8:
		_, block := r.Block()
		return func(k int) int { return k / block }
	case fp8.Block128x128:
		return func(k int) int { return fp8.TileIndex(k, cols, 128) }
	}
	return func(int) int { return 0 }
}

// scaleRuns calls visit for every run [lo, hi) of flat indices of a rows x
// cols parameter that share scale s under recipe r, in increasing order.
func scaleRuns(r fp8.Recipe, rows, cols int, visit func(lo, hi, s int)) {
	n := rows * cols
	switch r.Scaling {
	case fp8.Block1x128, fp8.MXFP8:
		_, block := r.Block()
		for s := 0; s*block < n; s++ {
			visit(s*block, min((s+1)*block, n), s)
		}
	case fp8.Block128x128:
		const tile = 128
		across := (cols + tile - 1) / tile
		for row := range rows {
			for j := range across {
				lo := row*cols + j*tile
				visit(lo, lo+min(tile, cols-j*tile), row/tile*across+j)
			}
		}
	default:
		visit(0, n, 0)
	}
}

// hostBytes returns b's bytes in host memory: b itself for a host buffer,
// else a copy read through the backend.
func (o *Optimizer) hostBytes(b buffer.Buffer) ([]byte, error) {
	if h, ok := b.(buffer.HostBuffer); ok {
		return h, nil
	}
	out := make([]byte, b.Len())
	if err := o.backend.Read(out, b, 0); err != nil {
		return nil, err
	}
	return out, nil
}
