package optimizertest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/optimizer/backend"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
)

// Result is what one rank holds after training. Its fields are exported so
// that a rank process can send it with encoding/gob.
type Result struct {
	Pieces  []optimizer.PieceState // this rank's shard of the state, from ReadPieces
	Tensors map[string]*fp8.Tensor // every FP8 parameter, gathered
	Weights map[string][]float32   // every high-precision parameter, gathered
	Results []optimizer.StepResult // one a step, in order
	Backend string                 // the name of the backend that ran the steps
	Scalars optimizer.ScalarState  // step count, loss scaler, amax histories
}

// Skipped returns whether each step was skipped, in order.
func (r Result) Skipped() []bool {
	s := make([]bool, len(r.Results))
	for i, sr := range r.Results {
		s[i] = sr.Skipped
	}
	return s
}

// Collect reads o's pieces, the gathered FP8 tensor of every parameter of
// params and the gathered weights of every high-precision one, and the name
// of o's backend, and its scalar state; Results is left empty. It returns the first error of o.
func Collect(o *optimizer.Optimizer, params []optimizer.Param) (Result, error) {
	res := Result{Tensors: map[string]*fp8.Tensor{}, Weights: map[string][]float32{}, Backend: o.Backend().Name(), Scalars: o.Scalars()}
	var err error
	if res.Pieces, err = o.ReadPieces(); err != nil {
		return Result{}, err
	}
	for _, p := range params {
		if p.HighPrecision {
			res.Weights[p.Name], err = o.Weights(p.Name)
		} else {
			res.Tensors[p.Name], err = o.Tensor(p.Name)
		}
		if err != nil {
			return Result{}, err
		}
	}
	return res, nil
}

// Train makes an optimizer of params on comm and be, initialised from
// InitWeights(params, 1) with cfg, and takes steps steps: before step s it
// sets every parameter's gradient to grad(p, s, comm.Rank()). It returns
// Collect's result after the last step, with the step results. The
// optimizer is closed before Train returns, comm is not. A failing step's
// error is wrapped with its number.
func Train(ctx context.Context, comm collective.Communicator, be backend.Backend, params []optimizer.Param, cfg optimizer.Config, steps int, grad GradFunc) (Result, error) {
	o, err := optimizer.New(ctx, comm, be, params, optimizer.FromMap(InitWeights(params, 1)), cfg)
	if err != nil {
		return Result{}, err
	}
	defer o.Close()
	var results []optimizer.StepResult
	for s := range steps {
		for _, p := range params {
			if err := o.SetGrad(p.Name, grad(p, s, comm.Rank())); err != nil {
				return Result{}, err
			}
		}
		sr, err := o.Step(ctx)
		if err != nil {
			return Result{}, fmt.Errorf("step %d: %w", s, err)
		}
		results = append(results, sr)
	}
	res, err := Collect(o, params)
	res.Results = results
	return res, err
}

// Run trains world in-process ranks (collective/inproc), each on
// cpu.New(2) with its own copy of cfg's loss scaler, with Train
// under a one-minute deadline, and returns their results by rank. It fails
// t naming the first rank that returned an error.
func Run(t testing.TB, world, steps int, params []optimizer.Param, cfg optimizer.Config, grad GradFunc) []Result {
	t.Helper()
	return RunRanks(t, world, cfg, func(ctx context.Context, comm collective.Communicator, cfg optimizer.Config) (Result, error) {
		return Train(ctx, comm, cpu.New(2), params, cfg, steps, grad)
	})
}

// RunRanks runs train on world in-process ranks (collective/inproc), one
// goroutine each, with its own copy of cfg's loss scaler, under a
// one-minute deadline, and returns their results by rank. It fails t naming
// the first rank that returned an error.
func RunRanks(t testing.TB, world int, cfg optimizer.Config, train func(context.Context, collective.Communicator, optimizer.Config) (Result, error)) []Result {
	t.Helper()
	comms := inproc.Communicators(world)
	out := make([]Result, world)
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r := range world {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			c := cfg
			if cfg.LossScaler != nil {
				ls := *cfg.LossScaler
				c.LossScaler = &ls
			}
			out[r], errs[r] = train(ctx, comms[r], c)
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return out
}
