package gpu

import (
	"fmt"

	"github.com/distopt/distopt/optimizer/backend"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/fp8grad"
)

// FP8Gradients wraps comm, a device communicator on be's GPU whose groups
// are ordered after the work queued on be's stream (Setup's NCCL
// communicator is), with collective/fp8grad.NewDevice on be's stream: the
// gradient reduce-scatters then travel in FP8 with per-block scales and
// FP32 accumulation (cfg), everything else as before. Pass the
// result to optimizer.New in place of comm (whose GPU optimizer.New can no
// longer check through the wrapper: FP8Gradients refuses a communicator
// on another GPU than be). It owns comm: its Close closes comm.
func FP8Gradients(be *Backend, comm collective.Communicator, cfg fp8grad.Config) (*fp8grad.Comm, error) {
	if be == nil {
		return nil, fmt.Errorf("gpu: FP8 gradients without a backend: %w", fp8grad.ErrConfig)
	}
	if d, ok := comm.(backend.OnDevice); ok && d.Ordinal() != be.Ordinal() {
		return nil, fmt.Errorf("gpu: FP8 gradients of a communicator on GPU %d with the kernels of GPU %d: %w", d.Ordinal(), be.Ordinal(), fp8grad.ErrConfig)
	}
	return fp8grad.NewDevice(comm, cfg, be.Stream())
}

// FP8Gradients wraps the rank's NCCL communicator with FP8 gradient
// reduce-scatters (the function FP8Gradients) and returns the communicator
// to give optimizer.New in place of r.Comm:
//
//	r, err := gpu.SetupFromEnv(ctx, nccl.Config{})
//	comm, err := r.FP8Gradients(fp8grad.Config{Format: fp8.E4M3})
//	opt, err := optimizer.New(ctx, comm, r.Backend, params, init, cfg)
//
// r.Close then closes the wrapper, and through it r.Comm. A second call
// is refused.
func (r *Rank) FP8Gradients(cfg fp8grad.Config) (*fp8grad.Comm, error) {
	if r.grads != nil {
		return nil, fmt.Errorf("gpu: the rank's communicator is already wrapped for FP8 gradients: %w", fp8grad.ErrConfig)
	}
	c, err := FP8Gradients(r.Backend, r.Comm, cfg)
	if err != nil {
		return nil, err
	}
	r.grads = c
	return c, nil
}
