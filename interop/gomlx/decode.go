package gomlxinterop

import (
	"fmt"
	"slices"

	"github.com/distopt/distopt/fp8"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// DecodeFP8 returns, inside a GoMLX graph, the float32 values of FP8 codes
// as distopt gathers them: every code looked up in a 256-entry table of the
// format's values, then multiplied by its scale_inv as one float32
// multiply, which is exactly fp8.Decode(code) x scale_inv.
//
// data holds the codes as uint8 in the parameter's shape (distopt's own,
// viewed as a rows x cols matrix by fp8.Matrix). scaleInv holds the
// recipe's scales in distopt's order: float32 [NumScales] for per-tensor
// scaling (current or delayed), 1x128 blocks and 128x128 tiles, or the
// E8M0 bytes (uint8 [NumScales]) for MXFP8, decoded by a second table.
// Blocks run along the flat index (k/128, or k/32 for MXFP8) and tiles
// number (row/128)*ceil(cols/128)+col/128, as distopt's casts do.
//
// The table exists because the StableHLO writer of go-xla cannot emit FP8
// element types, so the bytes enter the graph as uint8.
func DecodeFP8(data, scaleInv *graph.Node, shape []int, r fp8.Recipe) (*graph.Node, error) {
	return decodeFP8(data, scaleInv, shape, r, nil)
}

// decodeFP8 is DecodeFP8 whose codes, where after is not nil, are read as
// max(code, min(code, after)): the same codes, but a computation that
// needs after (a scalar of any type) first, so that XLA can neither merge
// it with the plain decode nor run it before after exists (see
// redecode.go).
func decodeFP8(data, scaleInv *graph.Node, shape []int, r fp8.Recipe, after *graph.Node) (*graph.Node, error) {
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("gomlxinterop: decoding FP8: %w", err)
	}
	if data.DType() != dtypes.Uint8 || !slices.Equal(data.Shape().Dimensions, shape) {
		return nil, fmt.Errorf("%w: FP8 codes are %s, want uint8 %v", ErrHandOver, data.Shape(), shape)
	}
	want, wantType := r.NumScales(shape), dtypes.Float32
	if r.Scaling == fp8.MXFP8 {
		wantType = dtypes.Uint8
	}
	if scaleInv.DType() != wantType || scaleInv.Shape().Size() != want {
		return nil, fmt.Errorf("%w: scale_inv is %s, want %d of %s for %v", ErrHandOver, scaleInv.Shape(), want, wantType, r)
	}
	g := data.Graph()
	rows, cols := fp8.Matrix(shape)
	n := rows * cols
	codes := graph.ConvertDType(graph.Reshape(data, n), dtypes.Int32)
	if after != nil {
		codes = graph.Max(codes, graph.Min(codes, graph.ConvertDType(after, dtypes.Int32)))
	}
	values := index(graph.Const(g, formatTable(r.Format)), codes)
	inv := graph.Reshape(scaleInv, want)
	if r.Scaling == fp8.MXFP8 {
		inv = lookup(graph.Const(g, e8m0Table()), inv)
	}
	var idx *graph.Node
	switch r.Scaling {
	case fp8.Block1x128, fp8.MXFP8:
		_, block := r.Block()
		idx = graph.DivScalar(graph.Iota(g, shapes.Make(dtypes.Int32, n), 0), block)
	case fp8.Block128x128:
		const tile = 128
		across := (cols + tile - 1) / tile
		row := graph.DivScalar(graph.Iota(g, shapes.Make(dtypes.Int32, rows, cols), 0), tile)
		col := graph.DivScalar(graph.Iota(g, shapes.Make(dtypes.Int32, rows, cols), 1), tile)
		idx = graph.Reshape(graph.Add(graph.MulScalar(row, across), col), n)
	default:
		return graph.Reshape(graph.Mul(values, graph.Reshape(inv)), shape...), nil
	}
	return graph.Reshape(graph.Mul(values, graph.Gather(inv, graph.ExpandAxes(idx, -1))), shape...), nil
}

// lookup returns table[codes] for a vector of uint8 codes: a gather from
// the table (over a vector: simplego's Gather takes index vectors of rank
// at most the table's).
func lookup(table, codes *graph.Node) *graph.Node {
	return index(table, graph.ConvertDType(codes, dtypes.Int32))
}

// index returns table[idx] for a vector of int32 indices.
func index(table, idx *graph.Node) *graph.Node {
	return graph.Gather(table, graph.ExpandAxes(idx, -1))
}

// formatTable returns the 256 values of format f, code by code.
func formatTable(f fp8.Format) []float32 {
	t := make([]float32, 256)
	for b := range t {
		t[b] = f.Decode(uint8(b))
	}
	return t
}

// e8m0Table returns the 256 values of the E8M0 scale bytes of MXFP8.
func e8m0Table() []float32 {
	t := make([]float32, 256)
	for b := range t {
		t[b] = fp8.E8M0Value(uint8(b))
	}
	return t
}
