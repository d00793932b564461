package gomlxinterop

import (
	"context"
	"fmt"
	"math"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/cpu"
	"github.com/distopt/distopt/shard"
)

// HostGPUPath is GPUTrainer's rank with the graph on a host backend.
type HostGPUPath = weightTrainer

// NewHostGPUPath makes GPUTrainer's rank on the host: distopt's CPU
// backend, the graph on gb (simplego), and hostDevice in place of the GPU.
func NewHostGPUPath(ctx context.Context, comm collective.Communicator, gb backends.Backend, gctx *mlctx.Context, model train.ModelFn, loss train.LossFn, first Batch, cfg GPUConfig) (*HostGPUPath, error) {
	return newWeightTrainer(ctx, cpu.New(0), comm, gb, &hostDevice{gb: gb}, gctx, model, loss, first, cfg)
}

// hostDevice is the weightDevice of the CPU tests: the weight inputs are
// tensors shared with gb, refreshed by a copy of distopt's host buffers,
// and the gradients are copied into the views. The placeholders are NaN,
// so a graph that read a variable instead of its decoded weights would
// give a NaN loss.
type hostDevice struct {
	gb     backends.Backend
	copies []hostCopy
}

type hostCopy struct {
	dst *tensors.Tensor
	src buffer.HostBuffer
}

func (h *hostDevice) placeholders(params []Param) error {
	for _, p := range params {
		t := tensors.FromShape(p.Var.Shape())
		tensors.MustMutableFlatData(t, func(f []float32) {
			for i := range f {
				f[i] = float32(math.NaN())
			}
		})
		if err := p.Var.SetValue(t); err != nil {
			return fmt.Errorf("placeholder of %q: %w", p.Name, err)
		}
	}
	return nil
}

func (h *hostDevice) input(buf buffer.Buffer, dt dtypes.DType, dims []int) (*tensors.Tensor, bool, error) {
	src, ok := buf.(buffer.HostBuffer)
	if !ok {
		return nil, false, fmt.Errorf("%w: distopt's buffer is %T, not host memory", ErrHandOver, buf)
	}
	t := tensors.FromShape(shapes.Make(dt, dims...))
	if h.gb.HasSharedBuffers() {
		if err := t.MaterializeOnDevice(h.gb, true, 0); err != nil {
			return nil, false, err
		}
	}
	h.copies = append(h.copies, hostCopy{dst: t, src: src})
	return t, false, nil
}

func (h *hostDevice) refresh() error {
	for _, c := range h.copies {
		if err := c.dst.MutableBytes(func(b []byte) { copy(b, c.src) }); err != nil {
			return err
		}
	}
	return nil
}

func (h *hostDevice) sync() error { return nil }

func (h *hostDevice) copyGrads(dst []buffer.Buffer, grads []*tensors.Tensor) error {
	for i, b := range dst {
		to, ok := b.(buffer.HostBuffer)
		if !ok {
			return fmt.Errorf("%w: gradient view %d is %T, not host memory", ErrHandOver, i, b)
		}
		if err := grads[i].ConstBytes(func(g []byte) { copy(to, g) }); err != nil {
			return err
		}
	}
	return nil
}

// lend copies every gradient output into host memory of its own, as the
// weight inputs are copied: distopt's CPU backend reads host buffers.
func (h *hostDevice) lend(grads []*tensors.Tensor) ([]buffer.Buffer, error) {
	out := make([]buffer.Buffer, len(grads))
	for i, g := range grads {
		b := make(buffer.HostBuffer, g.Shape().Memory())
		if err := g.ConstBytes(func(x []byte) { copy(b, x) }); err != nil {
			return nil, err
		}
		out[i] = b
	}
	return out, nil
}

func (h *hostDevice) close() error { return nil }

// Redecoded returns how many fresh decodes the DotGeneral gradients made.
func Redecoded() int64 { return redecoded.Load() }

// NewWeightGradExecWith is NewWeightGradExec with GPUConfig's KeepDecoded.
func NewWeightGradExecWith(backend backends.Backend, ctx *mlctx.Context, model train.ModelFn, loss train.LossFn, params []Param, views []optimizer.ParamView, gradType buffer.DType, keep bool) (*WeightGradExec, error) {
	return newWeightGradExec(backend, ctx, model, loss, params, views, gradType, weightGradOptions{keepDecoded: keep})
}

// NewBucketWeightGradExec is NewWeightGradExec with one gradient output
// per bucket of layout l, as GPUTrainer builds it to lend the gradients.
func NewBucketWeightGradExec(backend backends.Backend, ctx *mlctx.Context, model train.ModelFn, loss train.LossFn, params []Param, views []optimizer.ParamView, gradType buffer.DType, l *shard.Layout) (*WeightGradExec, error) {
	return newWeightGradExec(backend, ctx, model, loss, params, views, gradType, weightGradOptions{buckets: l})
}
