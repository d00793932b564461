package gomlxinterop

import (
	"math"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/interop/gomlx/internal/toy"
)

// TestDecodeAfterAnyScalar checks that decodeFP8 reads the same codes
// whatever scalar it waits for: for every code of E4M3 and a float32
// after of 0, ±1, 127, 128, 255, 256, ±1e10, ±Inf, NaN and the int32
// extremes (their conversions to int32 included), the values are
// DecodeFP8's, bit for bit.
func TestDecodeAfterAnyScalar(t *testing.T) {
	be, err := toy.Backend()
	if err != nil {
		t.Fatal(err)
	}
	r := fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}
	codes := make([]uint8, 256)
	for i := range codes {
		codes[i] = uint8(i)
	}
	inv := []float32{0.75}
	exec, err := graph.NewExec(be, func(c, s, after *graph.Node) []*graph.Node {
		plain, err := DecodeFP8(c, s, []int{16, 16}, r)
		if err != nil {
			panic(err)
		}
		waited, err := decodeFP8(c, s, []int{16, 16}, r, after)
		if err != nil {
			panic(err)
		}
		return []*graph.Node{plain, waited}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Finalize()
	for _, a := range []float32{0, 1, -1, 127, 128, 255, 256, 1e10, -1e10, float32(math.Inf(1)), float32(math.Inf(-1)),
		float32(math.NaN()), math.MaxInt32, math.MinInt32} {
		out, err := exec.Exec(tensors.FromFlatDataAndDimensions(codes, 16, 16), tensors.FromFlatDataAndDimensions(inv, 1), a)
		if err != nil {
			t.Fatal(err)
		}
		plain, waited := tensors.MustCopyFlatData[float32](out[0]), tensors.MustCopyFlatData[float32](out[1])
		for i := range plain {
			if math.Float32bits(plain[i]) != math.Float32bits(waited[i]) {
				t.Errorf("after %g: code %d decodes to %g, DecodeFP8 %g", a, i, waited[i], plain[i])
				break
			}
		}
	}
}

// reaches reports whether from depends on node (is it or has it among its
// inputs, recursively).
func reaches(from, node *graph.Node) bool {
	seen := map[*graph.Node]bool{}
	var walk func(n *graph.Node) bool
	walk = func(n *graph.Node) bool {
		if n == node {
			return true
		}
		if seen[n] {
			return false
		}
		seen[n] = true
		return slices.ContainsFunc(n.Inputs(), walk)
	}
	return walk(from)
}

// TestFreshWaits checks the structure that keeps XLA from running the
// second decode before backward reaches the product: the fresh decode of a
// marked weight, or of a reshape of one, depends on the product's output
// gradient v and reads the codes; an unmarked node is returned as it is.
func TestFreshWaits(t *testing.T) {
	be, err := toy.Backend()
	if err != nil {
		t.Fatal(err)
	}
	g := graph.NewGraph(be, "fresh")
	codes := graph.Parameter(g, "codes", shapes.Make(dtypes.Uint8, 4, 8))
	inv := graph.Parameter(g, "inv", shapes.Make(dtypes.Float32, 1))
	v := graph.Parameter(g, "v", shapes.Make(dtypes.Float32, 2, 8))
	r := fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}
	w, err := DecodeFP8(codes, inv, []int{4, 8}, r)
	if err != nil {
		t.Fatal(err)
	}
	markRedecode(w, func(after *graph.Node) *graph.Node {
		again, err := decodeFP8(codes, inv, []int{4, 8}, r, after)
		if err != nil {
			panic(err)
		}
		return again
	})
	defer forgetRedecode(w)
	if f := fresh(w, v); f == w || !reaches(f, v) || !reaches(f, codes) {
		t.Errorf("fresh decode: new %v, waits for v %v, reads the codes %v; want true, true, true", f != w, reaches(f, v), reaches(f, codes))
	}
	if f := fresh(graph.Reshape(w, 8, 4), v); f.Type() != graph.NodeTypeReshape || !reaches(f, v) || !reaches(f, codes) {
		t.Errorf("fresh decode of a reshape: a reshape %v, waits for v %v, reads the codes %v", f.Type() == graph.NodeTypeReshape, reaches(f, v), reaches(f, codes))
	}
	if f := fresh(v, v); f != v {
		t.Error("fresh of an unmarked node made a new node")
	}
}
