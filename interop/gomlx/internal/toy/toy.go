// Package toy holds the small model, the data and GoMLX's own Adam run that
// the adapter's tests, benchmarks and example share: an MLP regressing the
// outputs of a fixed random teacher network.
package toy

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/layers"
	"github.com/gomlx/gomlx/pkg/ml/layers/activations"
	"github.com/gomlx/gomlx/pkg/ml/train"
	"github.com/gomlx/gomlx/pkg/ml/train/losses"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"
)

// Shape is the MLP: In inputs, Hidden units in each of Layers hidden
// layers (Dense with bias, ReLU), Out outputs.
type Shape struct {
	In, Hidden, Layers, Out int
}

// Small is the model of the tests and the example.
var Small = Shape{In: 32, Hidden: 64, Layers: 2, Out: 8}

// Model returns the GoMLX model function of s (a train.ModelFn).
func (s Shape) Model() train.ModelFn {
	return func(ctx *mlctx.Context, _ any, in []*graph.Node) []*graph.Node {
		x := in[0]
		for l := range s.Layers {
			x = activations.Relu(layers.DenseWithBias(ctx.Inf("hidden_%d", l), x, s.Hidden))
		}
		return []*graph.Node{layers.DenseWithBias(ctx.In("out"), x, s.Out)}
	}
}

// Loss is the MLP's loss: mean squared error.
func Loss(labels, predictions []*graph.Node) *graph.Node {
	return losses.MeanSquaredError(labels, predictions)
}

// Model returns the model of the data's shape (Task).
func (d *Data) Model() train.ModelFn { return d.s.Model() }

// Loss is the MLP's loss (Task).
func (d *Data) Loss(labels, predictions []*graph.Node) *graph.Node { return Loss(labels, predictions) }

// Context returns a new GoMLX context whose variables initialise from seed.
func Context(seed int64) *mlctx.Context {
	ctx := mlctx.New()
	ctx.SetParam(mlctx.ParamInitialSeed, seed)
	return ctx
}

// Data makes batches: inputs drawn from a normal distribution, labels the
// outputs of a teacher MLP of the same shape with fixed random weights.
type Data struct {
	s       Shape
	teacher [][]float32 // per layer, [in, out] row-major, then the bias
}

// NewData returns the data of s with the teacher drawn from seed.
func NewData(s Shape, seed uint64) *Data {
	r := rand.New(rand.NewPCG(seed, 99))
	d := &Data{s: s}
	in := s.In
	for l := 0; l <= s.Layers; l++ {
		out := s.Hidden
		if l == s.Layers {
			out = s.Out
		}
		w := make([]float32, in*out+out)
		for i := range in * out {
			w[i] = float32(r.NormFloat64() * math.Sqrt(2/float64(in)))
		}
		for i := in * out; i < len(w); i++ {
			w[i] = float32(r.NormFloat64() * 0.1)
		}
		d.teacher = append(d.teacher, w)
		in = out
	}
	return d
}

// Batch returns batch number step of the given part (a rank, or a
// micro-batch) with n examples: inputs [n, In] and labels [n, Out].
func (d *Data) Batch(step, part, n int) (x, y *tensors.Tensor) {
	r := rand.New(rand.NewPCG(uint64(step), uint64(part)))
	xs := make([]float32, n*d.s.In)
	for i := range xs {
		xs[i] = float32(r.NormFloat64())
	}
	return tensors.FromFlatDataAndDimensions(xs, n, d.s.In), tensors.FromFlatDataAndDimensions(d.forward(xs, n), n, d.s.Out)
}

// forward runs the teacher in plain Go.
func (d *Data) forward(x []float32, n int) []float32 {
	in := d.s.In
	for l, w := range d.teacher {
		out := len(w) / (in + 1)
		y := make([]float32, n*out)
		for b := range n {
			for o := range out {
				s := w[in*out+o]
				for i := range in {
					s += x[b*in+i] * w[i*out+o]
				}
				if l < len(d.teacher)-1 {
					s = max(s, 0)
				}
				y[b*out+o] = s
			}
		}
		x, in = y, out
	}
	return x
}

// Task is a model with its loss and its data.
type Task interface {
	Model() train.ModelFn
	Loss(labels, predictions []*graph.Node) *graph.Node
	// Batch returns batch number step of the given part (a rank, or a
	// micro-batch) with n examples.
	Batch(step, part, n int) (x, y *tensors.Tensor)
}

// Concat returns the batches of parts 0..parts-1 of step stacked into one
// batch of parts*n examples (what one unsharded run sees).
func Concat(t Task, step, parts, n int) (x, y *tensors.Tensor) {
	var xs, ys []*tensors.Tensor
	for p := range parts {
		xt, yt := t.Batch(step, p, n)
		xs, ys = append(xs, xt), append(ys, yt)
	}
	return stack(xs), stack(ys)
}

// stack joins tensors of one shape along their first axis.
func stack(ts []*tensors.Tensor) *tensors.Tensor {
	dims := ts[0].Shape().Clone().Dimensions
	dims[0] *= len(ts)
	switch ts[0].DType() {
	case dtypes.Int32:
		return tensors.FromFlatDataAndDimensions(joinFlat[int32](ts), dims...)
	default:
		return tensors.FromFlatDataAndDimensions(joinFlat[float32](ts), dims...)
	}
}

func joinFlat[T float32 | int32](ts []*tensors.Tensor) []T {
	var out []T
	for _, t := range ts {
		out = append(out, tensors.MustCopyFlatData[T](t)...)
	}
	return out
}

// Adam trains task on backend with GoMLX's own Adam (learning rate lr,
// betas 0.9 and 0.999, epsilon eps, no weight decay) for steps steps, step
// k on Concat(task, k, parts, n), starting from the variables Context(seed)
// initialises. It returns the training loss of every step (before its
// update) and the context, whose variables hold the trained model.
func Adam(backend backends.Backend, task Task, seed int64, steps, parts, n int, lr, eps float64) ([]float32, *mlctx.Context, error) {
	ctx := Context(seed)
	opt := optimizers.Adam().LearningRate(lr).Epsilon(eps).Done()
	tr := train.NewTrainer(backend, ctx, task.Model(), task.Loss, opt, nil, nil)
	var out []float32
	for k := range steps {
		x, y := Concat(task, k, parts, n)
		m, err := tr.TrainStep(nil, []*tensors.Tensor{x}, []*tensors.Tensor{y})
		if err != nil {
			return nil, nil, fmt.Errorf("toy: GoMLX Adam step %d: %w", k, err)
		}
		out = append(out, tensors.ToScalar[float32](m[0]))
	}
	return out, ctx, nil
}

// Eval returns task's loss of the model held by ctx on x, y.
func Eval(backend backends.Backend, task Task, ctx *mlctx.Context, x, y *tensors.Tensor) (float32, error) {
	e, err := mlctx.NewExec(backend, ctx.Reuse(), func(ctx *mlctx.Context, x, y *graph.Node) *graph.Node {
		return graph.ReduceAllMean(task.Loss([]*graph.Node{y}, task.Model()(ctx, nil, []*graph.Node{x})))
	})
	if err != nil {
		return 0, err
	}
	out, err := e.Exec(x, y)
	if err != nil {
		return 0, err
	}
	return tensors.ToScalar[float32](out[0]), nil
}

// BackendConfig is the simplego configuration the tests and the example
// use: ops run one after the other (each op still uses several cores). In
// GoMLX v0.26.0 simplego's parallel op scheduler races (the race detector
// reports it inside Executable.executeParallel: an operand is judged at
// its last use, and overwritten, without the lock its counter needs), so
// results could depend on timing; bit-identity across ranks needs
// deterministic executions.
const BackendConfig = "ops_sequential"

// Backend returns a new simplego backend configured with BackendConfig.
func Backend() (backends.Backend, error) { return simplego.New(BackendConfig) }
