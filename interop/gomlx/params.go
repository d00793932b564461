package gomlxinterop

import (
	"fmt"

	"github.com/distopt/distopt/optimizer"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
)

// Rules decide how each GoMLX variable becomes a distopt parameter. A nil
// field takes the default given.
type Rules struct {
	// Trainable selects the variables distopt trains. Default: the
	// variable's Trainable flag (GoMLX's optimizer variables, step
	// counters and batch-norm averages are not trainable).
	Trainable func(v *mlctx.Variable) bool
	// HighPrecision selects the variables gathered in
	// Config.HighPrecisionType instead of FP8. Default: DefaultHighPrecision
	// (biases, normalisation gains and offsets, scalars).
	HighPrecision func(v *mlctx.Variable) bool
	// NoDecay selects the variables exempt from weight decay. Default:
	// DefaultHighPrecision.
	NoDecay func(v *mlctx.Variable) bool
	// Layout picks the variable's layout. Default: Transposed for a
	// variable named "weights" of rank 2 or more (Dense kernels, [in,
	// out]), AsIs otherwise.
	Layout func(v *mlctx.Variable) Layout
	// Group picks the parameter group (an index of optimizer.Config.Groups).
	// Default: 0.
	Group func(v *mlctx.Variable) int
}

// DefaultTrainable is the default Rules.Trainable: the variable's own flag.
func DefaultTrainable(v *mlctx.Variable) bool { return v.Trainable }

// DefaultHighPrecision is the default Rules.HighPrecision and Rules.NoDecay:
// variables of rank below 2 (biases, normalisation gains and offsets,
// scalars), and Dense biases of any rank (a Dense layer with several output
// axes, such as the query, key and value projections of GoMLX's
// multi-head attention, has a bias of rank 2).
func DefaultHighPrecision(v *mlctx.Variable) bool {
	return v.Shape().Rank() < 2 || v.Name() == "biases"
}

// DefaultLayout is the default Rules.Layout: Transposed for Dense kernels
// (named "weights", rank 2 or more), AsIs otherwise.
func DefaultLayout(v *mlctx.Variable) Layout {
	if v.Name() == "weights" && v.Shape().Rank() >= 2 {
		return Transposed
	}
	return AsIs
}

func (r Rules) withDefaults() Rules {
	if r.Trainable == nil {
		r.Trainable = DefaultTrainable
	}
	if r.HighPrecision == nil {
		r.HighPrecision = DefaultHighPrecision
	}
	if r.NoDecay == nil {
		r.NoDecay = DefaultHighPrecision
	}
	if r.Layout == nil {
		r.Layout = DefaultLayout
	}
	if r.Group == nil {
		r.Group = func(*mlctx.Variable) int { return 0 }
	}
	return r
}

// Param is one GoMLX variable as a distopt parameter.
type Param struct {
	// Param is what distopt sees: Name is the variable's scope and name,
	// Shape its shape in Layout.
	optimizer.Param
	Var    *mlctx.Variable
	Layout Layout
}

// Params maps vars, in their order, to distopt parameters under rules (nil
// fields take the defaults). Every variable must be float32 and have a
// value; Transposed needs rank 2 or more. Errors wrap ErrVariable.
func Params(vars []*mlctx.Variable, rules Rules) ([]Param, error) {
	rules = rules.withDefaults()
	out := make([]Param, 0, len(vars))
	for _, v := range vars {
		if v.DType() != dtypes.Float32 {
			return nil, fmt.Errorf("%w: %q is %s, the adapter hands over float32 variables only", ErrVariable, v.ScopeAndName(), v.DType())
		}
		if !v.HasValue() {
			return nil, fmt.Errorf("%w: %q has no value yet (initialise the context's variables first)", ErrVariable, v.ScopeAndName())
		}
		l := rules.Layout(v)
		dims := v.Shape().Dimensions
		if l != AsIs && (l != Transposed || len(dims) < 2) {
			return nil, fmt.Errorf("%w: layout %v of %q (shape %v) needs rank 2 or more", ErrVariable, l, v.ScopeAndName(), dims)
		}
		out = append(out, Param{
			Param: optimizer.Param{
				Name:          v.ScopeAndName(),
				Shape:         l.shapeFor(dims),
				HighPrecision: rules.HighPrecision(v),
				NoDecay:       rules.NoDecay(v),
				Group:         rules.Group(v),
			},
			Var:    v,
			Layout: l,
		})
	}
	return out, nil
}

// OptimizerParams returns the distopt side of params, for optimizer.New.
func OptimizerParams(params []Param) []optimizer.Param {
	out := make([]optimizer.Param, len(params))
	for i, p := range params {
		out[i] = p.Param
	}
	return out
}

// Initial returns an optimizer.InitFunc that reads the initial values from
// the variables of params, in distopt's layout.
func Initial(params []Param) optimizer.InitFunc {
	byName := map[string]Param{}
	for _, p := range params {
		byName[p.Name] = p
	}
	return func(name string, offset int, dst []float32) error {
		p, ok := byName[name]
		if !ok {
			return fmt.Errorf("gomlxinterop: no variable for %q: %w", name, optimizer.ErrUnknownParam)
		}
		full, err := Values(p)
		if err != nil {
			return err
		}
		if offset+len(dst) > len(full) {
			return fmt.Errorf("%w: %q has %d elements, asked for [%d, %d)", ErrVariable, name, len(full), offset, offset+len(dst))
		}
		copy(dst, full[offset:])
		return nil
	}
}

// Values returns a copy of p's variable in distopt's layout.
func Values(p Param) ([]float32, error) {
	t, err := p.Var.Value()
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %w", ErrVariable, p.Name, err)
	}
	out := make([]float32, t.Size())
	err = tensors.ConstFlatData(t, func(flat []float32) {
		if p.Layout == Transposed {
			rows, cols := split(t.Shape().Dimensions)
			eachTransposed(rows, cols, func(from, to int) { out[to] = flat[from] })
			return
		}
		copy(out, flat)
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %w", ErrVariable, p.Name, err)
	}
	return out, nil
}
