package gemm

import (
	"errors"
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/fp8"
)

// TestWeightAndGradient checks, without a GPU, the operand and output made
// of device buffers as an optimizer hands them out, and the refusals: host
// memory, no scale_inv, a shape that is not a matrix, a recipe without a
// layout.
func TestWeightAndGradient(t *testing.T) {
	data := buffer.DeviceBuffer{Ptr: 1 << 20, Size: 6}
	scales := buffer.DeviceBuffer{Ptr: 1 << 21, Size: 4}
	r := fp8.Recipe{Format: fp8.E5M2, Scaling: fp8.TensorCurrent}
	w, err := Weight(data, scales, []int{2, 3}, r)
	want := Operand{Data: 1 << 20, Rows: 2, Cols: 3, Format: fp8.E5M2, Scales: PerTensor, ScaleInv: 1 << 21}
	if err != nil || w != want {
		t.Errorf("Weight = %+v, %v; want %+v", w, err, want)
	}
	for _, c := range []struct {
		name           string
		data, scaleInv buffer.Buffer
		shape          []int
		r              fp8.Recipe
		want           error
	}{
		{"host memory", buffer.HostBuffer(make([]byte, 6)), scales, []int{2, 3}, r, ErrLayout},
		{"no scale_inv", data, nil, []int{2, 3}, r, ErrLayout},
		{"a vector", data, scales, []int{6}, r, ErrShape},
		{"no recipe", data, scales, []int{2, 3}, fp8.Recipe{}, ErrLayout},
	} {
		if _, err := Weight(c.data, c.scaleInv, c.shape, c.r); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	g, err := Gradient(data, buffer.Float32, true)
	if err != nil || g != (Output{Data: cuda.DevicePtr(1 << 20), Type: buffer.Float32, Accumulate: true}) {
		t.Errorf("Gradient = %+v, %v", g, err)
	}
	if _, err := Gradient(buffer.HostBuffer(make([]byte, 4)), buffer.Float32, false); !errors.Is(err, ErrLayout) {
		t.Errorf("Gradient of host memory: %v, want ErrLayout", err)
	}
}
