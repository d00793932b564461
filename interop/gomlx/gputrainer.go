//go:build cgo && linux

package gomlxinterop

import (
	"context"

	"github.com/gomlx/go-xla/pkg/pjrt"
	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/xla"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/optimizer/gpu"
)

// GPUTrainer is one data-parallel rank training a GoMLX model on a GPU, with
// distopt's CUDA backend. XLA computes the loss and gradients, through a PJRT
// CUDA plugin. The gradients are copied device to device, on distopt's
// stream, into its gradient views, and distopt steps. The next pass reads the
// gathered FP8 codes and scale_inv in place, through PJRT views, and
// WeightGradExec decodes them in the graph. So the weights live once, in
// distopt's buffers. With several ranks, each makes its own GPUTrainer and
// all call Step together. A GPUTrainer is not safe for concurrent use. The
// host orders XLA and distopt with two waits, which Timing reports. See
// docs/DESIGN.md, "Note: GoMLX hand-over".
type GPUTrainer struct {
	*weightTrainer
}

// gpuDevice is the weightDevice of a GPUTrainer.
type gpuDevice struct {
	be     *gpu.Backend
	xb     *xla.Backend
	client *pjrt.Client
	dev    backends.DeviceNum
	holder buffer.Buffer // the memory the variables' placeholder values view
	copies []deviceCopy  // the weight inputs refresh copies
}

// deviceCopy is a weight input that XLA owns, copied from distopt's buffer.
type deviceCopy struct {
	dst uintptr
	src buffer.DeviceBuffer
}

// NewGPUTrainer builds the trainer of model and loss for batches shaped
// like first on distopt's backend be and communicator comm (those of
// gpu.SetupFromEnv) and the GoMLX XLA backend xb, which must run on be's
// GPU (ErrDevice). The context's variables are created and initialised by
// XLA, handed to distopt as initial values, and then released: from then
// on each variable's value is a placeholder that the graph never reads.
// Ranks whose parameters differ are refused (optimizer.ErrMismatch).
func NewGPUTrainer(ctx context.Context, be *gpu.Backend, comm collective.Communicator, xb *xla.Backend, gctx *mlctx.Context, model train.ModelFn, loss train.LossFn, first Batch, cfg GPUConfig) (*GPUTrainer, error) {
	client, dev, err := xlaDevice(xb, be.Ordinal())
	if err != nil {
		return nil, err
	}
	d := &gpuDevice{be: be, xb: xb, client: client, dev: dev}
	t, err := newWeightTrainer(ctx, be, comm, xb, d, gctx, model, loss, first, cfg)
	if err != nil {
		return nil, err
	}
	return &GPUTrainer{t}, nil
}
