package cudnn

import (
	"fmt"
	"math"

	"github.com/distopt/distopt/bf16"
)

// interp runs a graph on the CPU in float64, with every tensor in memory
// at its own strides (so a reshape is a view and the layouts of the
// non-virtual tensors are exercised as cuDNN would read them). In exact
// mode nothing is rounded; otherwise every value stored is rounded to its
// tensor's type (bfloat16 or float32), as the fused kernel stores it at
// the least.
type interp struct {
	exact bool
	mem   map[*tensor][]float64
}

// span is the number of elements a tensor's strides reach.
func span(t *tensor) int {
	n := int64(1)
	for i := range 4 {
		n += (t.dims[i] - 1) * t.strides[i]
	}
	return int(n)
}

func (t *tensor) offset(idx [4]int64) int {
	return int(idx[0]*t.strides[0] + idx[1]*t.strides[1] + idx[2]*t.strides[2] + idx[3]*t.strides[3])
}

// each calls fn with every index of dims.
func each(dims [4]int64, fn func(idx [4]int64)) {
	var i [4]int64
	for i[0] = 0; i[0] < dims[0]; i[0]++ {
		for i[1] = 0; i[1] < dims[1]; i[1]++ {
			for i[2] = 0; i[2] < dims[2]; i[2]++ {
				for i[3] = 0; i[3] < dims[3]; i[3]++ {
					fn(i)
				}
			}
		}
	}
}

// broadcast maps an index of the output to one of t (dims of 1 repeat).
func broadcast(t *tensor, idx [4]int64) [4]int64 {
	for i := range 4 {
		if t.dims[i] == 1 {
			idx[i] = 0
		}
	}
	return idx
}

func (in *interp) round(t *tensor, v float64) float64 {
	if in.exact {
		return v
	}
	switch t.dtype {
	case dtBF16:
		return float64(bf16.Round(float32(v)))
	case dtFloat:
		return float64(float32(v))
	}
	return v
}

func (in *interp) load(t *tensor, idx [4]int64) float64 {
	if t.byValue {
		return float64(t.value)
	}
	return in.mem[t][t.offset(idx)]
}

func (in *interp) store(t *tensor, idx [4]int64, v float64) {
	in.mem[t][t.offset(idx)] = in.round(t, v)
}

// run executes g with the non-virtual tensors bound to bufs by uid (each
// slice starts at the tensor's base; outputs are written there).
func (in *interp) run(g *graph, bufs map[int64][]float64) error {
	in.mem = map[*tensor][]float64{}
	for _, t := range g.tensors {
		switch {
		case t.byValue:
		case t.virtual:
			in.mem[t] = make([]float64, span(t))
		default:
			b, ok := bufs[t.uid]
			if !ok || len(b) < span(t) {
				return fmt.Errorf("%s: tensor %s (uid %d) needs %d elements", g.name, t.name, t.uid, span(t))
			}
			in.mem[t] = b
		}
	}
	for i := range g.ops {
		if err := in.op(&g.ops[i]); err != nil {
			return fmt.Errorf("%s: %w", g.name, err)
		}
	}
	return nil
}

func (in *interp) op(o *op) error {
	switch o.kind {
	case opMatmul:
		return in.matmul(o)
	case opPointwise:
		return in.pointwise(o)
	case opReduction:
		return in.reduction(o)
	case opReshape:
		x, y := o.in[0], o.out
		if span(y) > len(in.mem[x]) {
			return fmt.Errorf("reshape %s reaches past %s", o.name, x.name)
		}
		for i := range in.mem[y] {
			in.mem[y][i] = in.round(y, in.mem[x][i])
		}
		return nil
	}
	return fmt.Errorf("op %s: unknown kind %d", o.name, o.kind)
}

// matmul: out[b, h, m, n] = sum over k of a[b, h, m, k]·b[b, h, k, n].
func (in *interp) matmul(o *op) error {
	a, b, y := o.in[0], o.in[1], o.out
	if a.dims[3] != b.dims[2] || y.dims[2] != a.dims[2] || y.dims[3] != b.dims[3] {
		return fmt.Errorf("matmul %s: %v x %v -> %v", o.name, a.dims, b.dims, y.dims)
	}
	each(y.dims, func(idx [4]int64) {
		s := 0.0
		for k := range a.dims[3] {
			ia, ib := broadcast(a, idx), broadcast(b, idx)
			ia[3], ib[2] = k, k
			s += in.load(a, ia) * in.load(b, ib)
		}
		in.store(y, idx, s)
	})
	return nil
}

func (in *interp) pointwise(o *op) error {
	y := o.out
	var err error
	each(y.dims, func(idx [4]int64) {
		arg := func(i int) float64 { return in.load(o.in[i], broadcast(o.in[i], idx)) }
		var v float64
		switch o.pw {
		case pwAdd:
			v = arg(0) + arg(1)
		case pwSub:
			v = arg(0) - arg(1)
		case pwMul:
			v = arg(0) * arg(1)
		case pwDiv:
			v = arg(0) / arg(1)
		case pwExp:
			v = math.Exp(arg(0))
		case pwLog:
			v = math.Log(arg(0))
		case pwIdentity:
			v = arg(0)
		case pwGenIndex:
			v = float64(idx[o.axis])
		case pwCmpGE:
			v = boolValue(arg(0) >= arg(1))
		case pwBinarySelect:
			v = arg(1)
			if arg(2) != 0 {
				v = arg(0)
			}
		default:
			err = fmt.Errorf("pointwise %s: mode %d", o.name, o.pw)
		}
		in.store(y, idx, v)
	})
	return err
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// reduction over the dimensions out has as 1.
func (in *interp) reduction(o *op) error {
	x, y := o.in[0], o.out
	acc := make(map[int]float64)
	each(x.dims, func(idx [4]int64) {
		k := y.offset(broadcast(y, idx))
		v := in.load(x, idx)
		old, seen := acc[k]
		switch {
		case !seen:
			acc[k] = v
		case o.red == redMax:
			acc[k] = math.Max(old, v)
		default:
			acc[k] = old + v
		}
	})
	if o.red != redMax && o.red != redAdd {
		return fmt.Errorf("reduction %s: operator %d", o.name, o.red)
	}
	each(y.dims, func(idx [4]int64) { in.store(y, idx, acc[y.offset(idx)]) })
	return nil
}
