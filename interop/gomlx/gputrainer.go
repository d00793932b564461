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

// GPUTrainer is one data-parallel rank training a GoMLX model on a GPU with
// distopt's CUDA backend: XLA (through a PJRT CUDA plugin) computes loss
// and gradients on the GPU, the gradients are copied device to device into
// distopt's gradient views on distopt's stream, distopt steps, and the
// next forward pass reads the gathered FP8 codes and scale_inv where
// distopt keeps them, through PJRT views of its memory (WeightGradExec
// decodes them in the graph). The model's weights live once, in distopt's
// gathered buffers. Not safe for concurrent use.
//
// Ordering is explicit. After the forward and backward pass the host reads
// the loss (PJRT's wait for the execution) and synchronises the GPU's
// primary context (every stream of XLA's and distopt's), so the copies
// queued next read finished gradients; after distopt's step the host waits
// for its gathers and its stream, so the next execution reads finished
// weights. Timing reports the cost of both waits.
//
// With several ranks (gpu.SetupFromEnv: NCCL, one process and one XLA
// client per GPU) every rank makes its own GPUTrainer and all call Step
// together. All but the device (the views, the copies, the waits) is the
// code the CPU tests run with simplego ranks over gRPC.
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
