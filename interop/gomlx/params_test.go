package gomlxinterop_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	gomlxinterop "github.com/distopt/distopt/interop/gomlx"
	"github.com/distopt/distopt/interop/gomlx/internal/toy"
	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/layers"
)

// normModel is a model with a Dense layer, a layer norm (gain and offset),
// a frozen (non-trainable) scale, an int32 counter, and a variable created
// in another scope that the graph never uses.
func normModel(ctx *mlctx.Context, _ any, in []*graph.Node) []*graph.Node {
	h := layers.DenseWithBias(ctx.In("proj"), in[0], 6)
	h = layers.LayerNormalization(ctx.In("norm"), h, -1).Done()
	frozen := ctx.In("frozen").VariableWithValue("scale", float32(2)).SetTrainable(false)
	ctx.In("count").VariableWithValue("n", int32(0)).SetTrainable(false)
	ctx.In("unused").VariableWithShape("w", shapes.Make(dtypes.Float32, 3, 3))
	return []*graph.Node{graph.Mul(layers.DenseWithBias(ctx.In("out"), h, 2), frozen.ValueGraph(h.Graph()))}
}

func buildNormModel(t *testing.T, be backends.Backend) *gomlxinterop.GradExec {
	t.Helper()
	e, err := gomlxinterop.NewGradExec(be, toy.Context(seed), normModel, toy.Loss, nil)
	if err != nil {
		t.Fatal(err)
	}
	x := tensors.FromShape(shapes.Make(dtypes.Float32, 4, 5))
	y := tensors.FromShape(shapes.Make(dtypes.Float32, 4, 2))
	if err := e.Build([]*tensors.Tensor{x}, []*tensors.Tensor{y}); err != nil {
		t.Fatal(err)
	}
	return e
}

// TestParams checks the mapping of a context's variables to parameters: the
// trainable variables the graph uses and only those, in the context's
// order, named by scope and name, Dense kernels transposed, rank-1
// variables high-precision and exempt from decay; then every rule
// overridden.
func TestParams(t *testing.T) {
	e := buildNormModel(t, newBackend(t))
	params, err := gomlxinterop.Params(e.Vars(), gomlxinterop.Rules{})
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		name     string
		shape    []int
		hp, nd   bool
		layout   gomlxinterop.Layout
		varShape []int
	}
	want := []row{
		{"/proj/dense/weights", []int{6, 5}, false, false, gomlxinterop.Transposed, []int{5, 6}},
		{"/proj/dense/biases", []int{6}, true, true, gomlxinterop.AsIs, []int{6}},
		{"/norm/layer_normalization/offset", []int{6}, true, true, gomlxinterop.AsIs, []int{6}},
		{"/norm/layer_normalization/gain", []int{6}, true, true, gomlxinterop.AsIs, []int{6}},
		{"/out/dense/weights", []int{2, 6}, false, false, gomlxinterop.Transposed, []int{6, 2}},
		{"/out/dense/biases", []int{2}, true, true, gomlxinterop.AsIs, []int{2}},
	}
	var got []row
	for _, p := range params {
		if p.Var.ScopeAndName() != p.Name {
			t.Errorf("%s maps variable %s", p.Name, p.Var.ScopeAndName())
		}
		got = append(got, row{p.Name, p.Shape, p.HighPrecision, p.NoDecay, p.Layout, p.Var.Shape().Dimensions})
	}
	// The layer norm's variables are created in the order its code picks;
	// compare as sets of rows, then check the order against the context.
	sortRows := func(rs []row) {
		slices.SortFunc(rs, func(a, b row) int { return strings.Compare(a.name, b.name) })
	}
	sortRows(want)
	gotSorted := slices.Clone(got)
	sortRows(gotSorted)
	if len(gotSorted) != len(want) {
		t.Fatalf("got %d parameters %v, want %d", len(gotSorted), gotSorted, len(want))
	}
	for i := range want {
		w, g := want[i], gotSorted[i]
		if w.name != g.name || !slices.Equal(w.shape, g.shape) || w.hp != g.hp || w.nd != g.nd || w.layout != g.layout || !slices.Equal(w.varShape, g.varShape) {
			t.Errorf("parameter %+v, want %+v", g, w)
		}
	}
	var order []string
	for v := range e.Context().IterVariables() {
		if i := slices.IndexFunc(got, func(r row) bool { return r.name == v.ScopeAndName() }); i >= 0 {
			order = append(order, v.ScopeAndName())
		}
	}
	for i, r := range got {
		if order[i] != r.name {
			t.Fatalf("parameter %d is %s, the context's order has %s", i, r.name, order[i])
		}
	}

	// Every rule overridden: only the output layer trains, all of it in
	// high precision, as-is, in group 1, and decays.
	out := func(v *mlctx.Variable) bool { return strings.HasPrefix(v.Scope(), "/out") }
	params, err = gomlxinterop.Params(e.Vars(), gomlxinterop.Rules{
		Trainable:     out,
		HighPrecision: func(*mlctx.Variable) bool { return true },
		NoDecay:       func(*mlctx.Variable) bool { return false },
		Layout:        func(*mlctx.Variable) gomlxinterop.Layout { return gomlxinterop.AsIs },
		Group:         func(*mlctx.Variable) int { return 1 },
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range params {
		if !p.HighPrecision || p.NoDecay || p.Group != 1 || p.Layout != gomlxinterop.AsIs || !slices.Equal(p.Shape, p.Var.Shape().Dimensions) {
			t.Errorf("overridden rules not applied to %+v", p.Param)
		}
	}
	// Trainable filters only in the gradient executor: Params maps what it is given.
	if len(params) != len(e.Vars()) {
		t.Errorf("Params dropped variables: %d of %d", len(params), len(e.Vars()))
	}
}

// TestParamsErrors checks that a transposed rank-1 variable and a
// non-float32 variable are refused, naming the variable.
func TestParamsErrors(t *testing.T) {
	e := buildNormModel(t, newBackend(t))
	_, err := gomlxinterop.Params(e.Vars(), gomlxinterop.Rules{Layout: func(*mlctx.Variable) gomlxinterop.Layout { return gomlxinterop.Transposed }})
	if !errors.Is(err, gomlxinterop.ErrVariable) || !strings.Contains(err.Error(), "biases") {
		t.Errorf("transposed bias: %v, want ErrVariable naming it", err)
	}
	count := e.Context().InspectVariable("/count", "n")
	if _, err := gomlxinterop.Params([]*mlctx.Variable{count}, gomlxinterop.Rules{}); !errors.Is(err, gomlxinterop.ErrVariable) || !strings.Contains(err.Error(), "/count/n") {
		t.Errorf("int32 variable: %v, want ErrVariable naming it", err)
	}
}

// TestGradientOrder checks that the executor's gradients come in the order
// of Vars: each has its variable's shape, and equals the gradient GoMLX
// computes for that variable alone.
func TestGradientOrder(t *testing.T) {
	be := newBackend(t)
	e := buildNormModel(t, be)
	data := toy.NewData(toy.Shape{In: 5, Out: 2}, 3)
	x, y := data.Batch(0, 0, 4)
	loss, grads, err := e.Exec([]*tensors.Tensor{x}, []*tensors.Tensor{y})
	if err != nil {
		t.Fatal(err)
	}
	if len(grads) != len(e.Vars()) {
		t.Fatalf("%d gradients for %d variables", len(grads), len(e.Vars()))
	}
	for i, v := range e.Vars() {
		if !grads[i].Shape().Equal(v.Shape()) {
			t.Errorf("gradient %d is %s, variable %s is %s", i, grads[i].Shape(), v.ScopeAndName(), v.Shape())
		}
		// The gradient of this variable alone, from a graph of GoMLX's own.
		one, err := mlctx.NewExec(be, e.Context().Reuse(), func(ctx *mlctx.Context, x, y *graph.Node) []*graph.Node {
			l := graph.ReduceAllMean(toy.Loss([]*graph.Node{y}, normModel(ctx, nil, []*graph.Node{x})))
			return []*graph.Node{l, graph.Gradient(l, v.ValueGraph(x.Graph()))[0]}
		})
		if err != nil {
			t.Fatal(err)
		}
		out, err := one.Exec(x, y)
		if err != nil {
			t.Fatal(err)
		}
		if k := firstDiff(tensors.MustCopyFlatData[float32](grads[i]), tensors.MustCopyFlatData[float32](out[1])); k >= 0 {
			t.Errorf("gradient %d (%s) differs from GoMLX's own at %d", i, v.ScopeAndName(), k)
		}
		if tensors.ToScalar[float32](out[0]) != tensors.ToScalar[float32](loss) {
			t.Errorf("loss %v, GoMLX's own %v", tensors.ToScalar[float32](loss), tensors.ToScalar[float32](out[0]))
		}
	}
}

// TestGraphMismatch checks that a graph (for a new batch shape) that trains
// other variables than the first one is refused with ErrGraph. (GoMLX
// itself refuses new variables once a graph ran; a graph can still leave
// some out.)
func TestGraphMismatch(t *testing.T) {
	model := func(ctx *mlctx.Context, _ any, in []*graph.Node) []*graph.Node {
		y := layers.DenseWithBias(ctx.In("a"), in[0], 2)
		if in[0].Shape().Dimensions[0] > 4 { // a smaller batch leaves this layer out
			y = layers.DenseWithBias(ctx.In("b"), y, 2)
		}
		return []*graph.Node{y}
	}
	e, err := gomlxinterop.NewGradExec(newBackend(t), toy.Context(seed), model, toy.Loss, nil)
	if err != nil {
		t.Fatal(err)
	}
	batch := func(n int) ([]*tensors.Tensor, []*tensors.Tensor) {
		return []*tensors.Tensor{tensors.FromShape(shapes.Make(dtypes.Float32, n, 3))}, []*tensors.Tensor{tensors.FromShape(shapes.Make(dtypes.Float32, n, 2))}
	}
	if err := e.Build(batch(8)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.Exec(batch(4)); !errors.Is(err, gomlxinterop.ErrGraph) {
		t.Errorf("graph without some variables: %v, want ErrGraph", err)
	}
}

// TestParamsTransformer checks the default rules on GoMLX's own attention,
// embedding and layer-norm layers: the rank-3 query, key and value kernels
// [in, heads, dim] become [heads, dim, in] (blocks along in), their rank-2
// biases are high precision and not decayed, embedding tables stay as they
// are ([vocab, dim], read along dim) in FP8.
func TestParamsTransformer(t *testing.T) {
	e, err := gomlxinterop.NewGradExec(newBackend(t), toy.Context(seed), toy.Tiny.Model(), toy.Tiny.Loss, nil)
	if err != nil {
		t.Fatal(err)
	}
	x, y := toy.Tiny.Batch(0, 0, 2)
	if err := e.Build([]*tensors.Tensor{x}, []*tensors.Tensor{y}); err != nil {
		t.Fatal(err)
	}
	params, err := gomlxinterop.Params(e.Vars(), gomlxinterop.Rules{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		shape  []int
		hp     bool
		layout gomlxinterop.Layout
	}{
		"/tokens/embeddings": {[]int{16, 32}, false, gomlxinterop.AsIs},
		"/attention/MultiHeadAttention/query/dense/weights":  {[]int{4, 8, 32}, false, gomlxinterop.Transposed},
		"/attention/MultiHeadAttention/query/dense/biases":   {[]int{4, 8}, true, gomlxinterop.AsIs},
		"/attention/MultiHeadAttention/output/dense/weights": {[]int{32, 32}, false, gomlxinterop.Transposed},
		"/norm_0/layer_normalization/gain":                   {[]int{32}, true, gomlxinterop.AsIs},
		"/ffn_0/dense/weights":                               {[]int{64, 32}, false, gomlxinterop.Transposed},
	}
	seen := 0
	for _, p := range params {
		w, ok := want[p.Name]
		if !ok {
			continue
		}
		seen++
		if !slices.Equal(p.Shape, w.shape) || p.HighPrecision != w.hp || p.NoDecay != w.hp || p.Layout != w.layout {
			t.Errorf("%s: shape %v high precision %t no decay %t %v, want %v %t %t %v", p.Name, p.Shape, p.HighPrecision, p.NoDecay, p.Layout, w.shape, w.hp, w.hp, w.layout)
		}
	}
	if seen != len(want) || len(params) != 20 {
		t.Errorf("found %d of the %d expected parameters among %d (want 20)", seen, len(want), len(params))
	}
}
