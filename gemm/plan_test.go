package gemm

import (
	"testing"

	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/fp8"
	icuda "github.com/distopt/distopt/internal/cuda"
)

// TestScratch checks the planner's figures against the memory each choice
// needs, computed by hand (pieces rounded up to 256 bytes).
func TestScratch(t *testing.T) {
	const T, in, out = 256, 512, 384
	op := func(rows, cols int, l Layout, transposed bool, scaleAt int) Operand {
		return Operand{Rows: rows, Cols: cols, Format: fp8.E4M3, Scales: l, Transposed: transposed, Data: 1 << 20,
			ScaleInv: cuda.DevicePtr(icuda.DevicePtr(1 << 21).Add(scaleAt))}
	}
	x, dy := op(T, in, PerTensor, false, 0), op(T, out, PerTensor, false, 0)
	w := op(out, in, PerTensor, false, 0)
	wOdd := op(out, in, PerTensor, false, 4) // a scale_inv 4 bytes into the optimizer's array
	tiles := op(out, in, Tiles128, false, 0)
	tiles3 := op(out, 384, Tiles128, false, 0) // 3 K tiles: the grid's rows padded to 4
	rowsX := op(T, in, Rows128, false, 0)
	xT, dyT := op(T, in, Rows128, true, 0), op(T, out, Rows128, true, 0)
	mx := op(out, in, MX32, false, 0)
	cases := []struct {
		name string
		p    Product
		a, b Operand
		want int
	}{
		{"forward, per tensor", ForwardProduct, x, w, 0},
		{"forward, misaligned scale", ForwardProduct, x, wOdd, 256},
		{"forward, tiles read in place", ForwardProduct, rowsX, tiles, 0},
		{"forward, tile rows padded", ForwardProduct, op(T, 384, Rows128, false, 0), tiles3, 256}, // 3 x 4 floats,
		{"dgrad, per tensor: the transposed weight", DGradProduct, dy, w, out * in},
		{"dgrad, tiles: weight and its grid", DGradProduct, op(T, out, Rows128, false, 0), tiles, out*in + 256},
		{"wgrad, row-major per-tensor activations", WGradProduct, dy, x, T*out + T*in},
		{"wgrad, transposed 1x128 activations", WGradProduct, dyT, xT, 0},
		{"fallback: bfloat16 copies", ForwardProduct, x, mx, 2*T*in + 2*out*in},
	}
	for _, c := range cases {
		if got := Scratch(c.p, c.a, c.b); got != c.want {
			t.Errorf("%s: Scratch = %d, want %d", c.name, got, c.want)
		}
	}
}
