package gomlxinterop_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/distopt/distopt/fp8"
	gomlxinterop "github.com/distopt/distopt/interop/gomlx"
	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// decodeCase is one FP8 tensor: its recipe, shape, codes and scales.
type decodeCase struct {
	name   string
	recipe fp8.Recipe
	shape  []int
	codes  []uint8
	inv    []float32 // scale_inv (per-tensor and block recipes)
	e8m0   []uint8   // scale bytes (MXFP8)
}

// decodeCases returns every code of both formats per tensor, and block,
// tile and MXFP8 layouts with partial edge blocks, filled with random
// codes (every code present) and scales spanning many binades.
func decodeCases() []decodeCase {
	r := rand.New(rand.NewPCG(3, 5))
	fill := func(n int) []uint8 {
		c := make([]uint8, n)
		for i := range c {
			c[i] = uint8(i)
			if i >= 256 {
				c[i] = uint8(r.IntN(256))
			}
		}
		return c
	}
	scales := func(n int) []float32 {
		s := make([]float32, n)
		for i := range s {
			s[i] = float32(math.Ldexp(1+r.Float64(), r.IntN(40)-20))
		}
		return s
	}
	var cs []decodeCase
	for _, f := range []fp8.Format{fp8.E4M3, fp8.E5M2} {
		cs = append(cs,
			decodeCase{name: f.String() + " per tensor", recipe: fp8.Recipe{Format: f, Scaling: fp8.TensorCurrent}, shape: []int{256}, codes: fill(256), inv: []float32{0.3711}},
			decodeCase{name: f.String() + " delayed", recipe: fp8.Recipe{Format: f, Scaling: fp8.TensorDelayed}, shape: []int{4, 64}, codes: fill(256), inv: scales(1)},
			decodeCase{name: f.String() + " 1x128", recipe: fp8.Recipe{Format: f, Scaling: fp8.Block1x128}, shape: []int{3, 200}, codes: fill(600), inv: scales(5)},
			decodeCase{name: f.String() + " 128x128", recipe: fp8.Recipe{Format: f, Scaling: fp8.Block128x128}, shape: []int{130, 2, 130}, codes: fill(130 * 260), inv: scales(2 * 3)},
			decodeCase{name: f.String() + " MXFP8", recipe: fp8.Recipe{Format: f, Scaling: fp8.MXFP8}, shape: []int{5, 70}, codes: fill(350), e8m0: []uint8{0, 1, 100, 126, 127, 128, 140, 200, 254, 255, 3}},
		)
	}
	return cs
}

// want is the reference: fp8.Decode of each code times its scale_inv,
// the scale found by the index rules of distopt's casts.
func (c decodeCase) want() []float32 {
	_, cols := fp8.Matrix(c.shape)
	out := make([]float32, len(c.codes))
	for k, b := range c.codes {
		s := 0
		switch c.recipe.Scaling {
		case fp8.Block1x128:
			s = k / 128
		case fp8.MXFP8:
			s = k / fp8.MXBlock
		case fp8.Block128x128:
			s = fp8.TileIndex(k, cols, 128)
		}
		inv := float32(0)
		if c.e8m0 != nil {
			inv = fp8.E8M0Value(c.e8m0[s])
		} else {
			inv = c.inv[s]
		}
		out[k] = c.recipe.Format.Decode(b) * inv
	}
	return out
}

// decodeOn runs DecodeFP8 for c on backend and returns the values.
func decodeOn(t *testing.T, be backends.Backend, c decodeCase) []float32 {
	t.Helper()
	codes := tensors.FromFlatDataAndDimensions(c.codes, c.shape...)
	var scales *tensors.Tensor
	if c.e8m0 != nil {
		scales = tensors.FromFlatDataAndDimensions(c.e8m0, len(c.e8m0))
	} else {
		scales = tensors.FromFlatDataAndDimensions(c.inv, len(c.inv))
	}
	exec, err := graph.NewExec(be, func(data, inv *graph.Node) *graph.Node {
		out, err := gomlxinterop.DecodeFP8(data, inv, c.shape, c.recipe)
		if err != nil {
			panic(err)
		}
		return out
	})
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Finalize()
	out, err := exec.Exec(codes, scales)
	if err != nil {
		t.Fatal(err)
	}
	return tensors.MustCopyFlatData[float32](out[0])
}

// sameBits reports whether a and b are the same float32, NaNs equal to
// NaNs (an XLA device may not keep a NaN's payload).
func sameBits(a, b float32) bool {
	if a != a || b != b {
		return a != a && b != b
	}
	return math.Float32bits(a) == math.Float32bits(b)
}

// TestDecodeFP8 checks the in-graph decode on the CPU backend bit for bit
// against fp8.Decode x scale_inv: every code of E4M3 and E5M2, per-tensor
// (current and delayed), 1x128 blocks, 128x128 tiles and MXFP8, with
// partial edge blocks.
func TestDecodeFP8(t *testing.T) {
	be := newBackend(t)
	for _, c := range decodeCases() {
		t.Run(c.name, func(t *testing.T) {
			got, want := decodeOn(t, be, c), c.want()
			if len(got) != len(want) {
				t.Fatalf("%d values, want %d", len(got), len(want))
			}
			bad := 0
			for k := range want {
				if !sameBits(got[k], want[k]) {
					if bad++; bad <= 5 {
						t.Errorf("element %d (code %#02x): %g (%#08x), want %g (%#08x)", k, c.codes[k], got[k], math.Float32bits(got[k]), want[k], math.Float32bits(want[k]))
					}
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d elements differ", bad, len(want))
			}
		})
	}
}

// TestDecodeFP8Errors checks that codes of the wrong type or shape and a
// wrong number of scales are refused with ErrHandOver.
func TestDecodeFP8Errors(t *testing.T) {
	g := graph.NewGraph(newBackend(t), "errors")
	r := fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.Block1x128}
	codes := graph.Parameter(g, "codes", tensors.FromFlatDataAndDimensions(make([]uint8, 300), 300).Shape())
	floats := graph.Parameter(g, "floats", tensors.FromFlatDataAndDimensions(make([]float32, 300), 300).Shape())
	three := graph.Parameter(g, "three", tensors.FromFlatDataAndDimensions(make([]float32, 3), 3).Shape())
	two := graph.Parameter(g, "two", tensors.FromFlatDataAndDimensions(make([]float32, 2), 2).Shape())
	for _, c := range []struct {
		name        string
		data, scale *graph.Node
		shape       []int
	}{
		{"float codes", floats, three, []int{300}},
		{"other shape", codes, three, []int{3, 100}},
		{"two scales", codes, two, []int{300}},
	} {
		if _, err := gomlxinterop.DecodeFP8(c.data, c.scale, c.shape, r); !errors.Is(err, gomlxinterop.ErrHandOver) {
			t.Errorf("%s: error %v, want ErrHandOver", c.name, err)
		}
	}
	if _, err := gomlxinterop.DecodeFP8(codes, three, []int{300}, fp8.Recipe{}); err == nil {
		t.Error("an invalid recipe was accepted")
	}
}
