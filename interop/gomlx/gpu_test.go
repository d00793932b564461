//go:build cgo && linux

package gomlxinterop_test

import (
	"bytes"
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/backends/xla"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/single"
	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/fp8"
	gomlxinterop "github.com/distopt/distopt/interop/gomlx"
	"github.com/distopt/distopt/interop/gomlx/internal/toy"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/cpu"
	"github.com/distopt/distopt/optimizer/gpu"
)

// gpuSetup is what the GPU tests share: distopt's backend and one XLA
// backend (a process keeps one PJRT client per test binary).
var gpuSetup struct {
	be      *gpu.Backend
	xb      *xla.Backend
	err     error
	xlaTook uint64 // device bytes that making the XLA backend took
}

// openGPU returns distopt's CUDA backend on GPU 0 and the XLA backend on
// the PJRT CUDA plugin, or skips without a GPU or plugin.
func openGPU(t *testing.T) (*gpu.Backend, *xla.Backend) {
	t.Helper()
	if testing.Short() {
		t.Skip("GPU test (not in -short)")
	}
	if gpuSetup.be == nil && gpuSetup.err == nil {
		gpuSetup.be, gpuSetup.err = gpu.New(0)
		if gpuSetup.err == nil {
			before, _, _ := gpuSetup.be.Device().MemInfo()
			gpuSetup.xb, gpuSetup.err = gomlxinterop.NewXLABackend(gomlxinterop.XLAConfig{})
			after, _, _ := gpuSetup.be.Device().MemInfo()
			gpuSetup.xlaTook = before - min(before, after)
		}
	}
	switch {
	case errors.Is(gpuSetup.err, gpu.ErrUnavailable), errors.Is(gpuSetup.err, gomlxinterop.ErrNoPlugin):
		t.Skip(gpuSetup.err)
	case gpuSetup.err != nil:
		t.Fatal(gpuSetup.err)
	}
	return gpuSetup.be, gpuSetup.xb
}

// deviceComm is a one-rank communicator on be's device memory.
func deviceComm(be *gpu.Backend) collective.Communicator {
	return single.New(buffer.Device, func(dst, src buffer.Buffer) error {
		d, s := dst.(buffer.DeviceBuffer), src.(buffer.DeviceBuffer)
		return be.Stream().CopyDtoD(cuda.DevicePtr(d.Ptr), cuda.DevicePtr(s.Ptr), min(d.Size, s.Size))
	})
}

func newGPUTrainer(t *testing.T, r fp8.Recipe, gt buffer.DType) *gomlxinterop.GPUTrainer {
	t.Helper()
	return newGPUTrainerCopying(t, r, gt, false)
}

// newGPUTrainerCopying is newGPUTrainer with GPUConfig.CopyGradients.
func newGPUTrainerCopying(t *testing.T, r fp8.Recipe, gt buffer.DType, copyGrads bool) *gomlxinterop.GPUTrainer {
	t.Helper()
	be, xb := openGPU(t)
	cfg := adamConfig()
	cfg.Optimizer.Recipe, cfg.Optimizer.GradType = r, gt
	x, y := toy.Tiny.Batch(0, 0, perRank)
	tr, err := gomlxinterop.NewGPUTrainer(context.Background(), be, deviceComm(be), xb, toy.Context(seed), toy.Tiny.Model(), toy.Tiny.Loss,
		gomlxinterop.Batch{Inputs: []*tensors.Tensor{x}, Labels: []*tensors.Tensor{y}}, gomlxinterop.GPUConfig{Optimizer: cfg.Optimizer, CopyGradients: copyGrads})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tr.Close(); err != nil {
			t.Error(err)
		}
	})
	return tr
}

var gpuRecipes = []struct {
	name string
	r    fp8.Recipe
}{
	{"current", fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}},
	{"1x128 e5m2", fp8.Recipe{Format: fp8.E5M2, Scaling: fp8.Block1x128}},
	{"128x128", fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.Block128x128}},
	{"mxfp8", fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.MXFP8}},
}

// TestGPUDecodedWeights checks that the weights XLA decodes on the GPU from
// distopt's gathered buffers (through PJRT views) equal, bit for bit,
// fp8.Decode x scale_inv as optimizer.WeightsInto computes it, after setup
// and after steps. Skips without a GPU or plugin.
func TestGPUDecodedWeights(t *testing.T) {
	for _, c := range gpuRecipes {
		t.Run(c.name, func(t *testing.T) {
			tr := newGPUTrainer(t, c.r, buffer.BFloat16)
			_, xb := openGPU(t)
			for s := range 3 {
				checkDecoded(t, xb, tr.WeightGradExec(), tr.Optimizer(), tr.Params(), tr.Weights())
				x, y := toy.Tiny.Batch(s, 0, perRank)
				if _, _, err := tr.Step(context.Background(), gomlxinterop.Batch{Inputs: []*tensors.Tensor{x}, Labels: []*tensors.Tensor{y}}); err != nil {
					t.Fatal(err)
				}
			}
			tm := tr.Timing()
			t.Logf("%d weight inputs read in place, %d copied; per step: compute %v, sync %v, copy %v, update %v", tm.Views, tm.Copies,
				tm.Compute/3, tm.Sync/3, tm.Copy/3, tm.Update/3)
		})
	}
}

// TestGPUMatchesCPU trains on the GPU path and feeds every step's
// gradients, as distopt's gradient views read them (views of the bucket
// outputs XLA wrote, lent to the step), to a CPU
// optimizer started from the same masters: the gradient views must hold
// XLA's gradients byte for byte, and after every step the gathered
// parameters, and at the end the masters and moments, must be equal bit
// for bit (distopt's steps are bit-identical across backends). The
// stress variant takes many short steps, which would expose a missing
// wait between XLA's streams and distopt's. Skips without a GPU or plugin.
func TestGPUMatchesCPU(t *testing.T) {
	for _, c := range []struct {
		name  string
		r     fp8.Recipe
		gt    buffer.DType
		steps int
		copy  bool // GPUConfig.CopyGradients
	}{
		{"current fp32", fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}, buffer.Float32, 6, false},
		{"current fp32 copied", fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}, buffer.Float32, 6, true},
		{"1x128 bf16", fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.Block1x128}, buffer.BFloat16, 6, false},
		{"stress", fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}, buffer.BFloat16, 300, false},
		{"stress copied", fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}, buffer.BFloat16, 300, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := newGPUTrainerCopying(t, c.r, c.gt, c.copy)
			cpu := cpuTwin(t, tr)
			gopt := tr.Optimizer()
			for s := range c.steps {
				x, y := toy.Tiny.Batch(s, 0, perRank)
				if _, err := tr.Forward(gomlxinterop.Batch{Inputs: []*tensors.Tensor{x}, Labels: []*tensors.Tensor{y}}); err != nil {
					t.Fatal(err)
				}
				for i, p := range tr.Params() {
					v, err := gopt.Grad(p.Name)
					if err != nil {
						t.Fatal(err)
					}
					got := make([]byte, v.Data.Len())
					if err := gopt.Backend().Read(got, v.Data, 0); err != nil {
						t.Fatal(err)
					}
					if want := paramGrad(t, tr, i); !bytes.Equal(got, want) {
						t.Fatalf("step %d: gradient view of %s differs from XLA's gradient", s, p.Name)
					}
					cv, err := cpu.Grad(p.Name)
					if err != nil {
						t.Fatal(err)
					}
					copy(cv.Data.(buffer.HostBuffer), got)
				}
				if _, err := tr.Update(context.Background()); err != nil {
					t.Fatal(err)
				}
				if _, err := cpu.Step(context.Background()); err != nil {
					t.Fatal(err)
				}
				_, xb := openGPU(t)
				if s%10 == 0 || s == c.steps-1 {
					checkDecoded(t, xb, tr.WeightGradExec(), gopt, tr.Params(), tr.Weights())
					samePieces(t, s, tr.Params(), gopt, cpu)
				}
			}
		})
	}
}

// paramGrad returns the bytes of parameter i's gradient among tr's graph
// outputs: its place in its bucket's output when the gradients are lent,
// else its own output.
func paramGrad(t *testing.T, tr *gomlxinterop.GPUTrainer, i int) []byte {
	t.Helper()
	o := tr.Optimizer()
	if !o.Config().ExternalGradients {
		return tensorBytes(t, tr.Grads()[i])
	}
	l, sz := o.Layout(), o.Config().GradType.Size()
	pl := l.Places[l.Index(tr.Params()[i].Name)]
	return tensorBytes(t, tr.Grads()[pl.Bucket])[pl.Offset*sz : (pl.Offset+pl.Len)*sz]
}

// cpuTwin returns a one-rank CPU optimizer with tr's parameters and
// configuration, started from tr's masters, holding its own gradients.
func cpuTwin(t *testing.T, tr *gomlxinterop.GPUTrainer) *optimizer.Optimizer {
	t.Helper()
	pieces, err := tr.Optimizer().ReadPieces()
	if err != nil {
		t.Fatal(err)
	}
	master := map[string][]float32{}
	for _, p := range pieces {
		master[p.Param] = append(master[p.Param], p.Master...)
	}
	init := func(name string, off int, dst []float32) error { copy(dst, master[name][off:]); return nil }
	cfg := tr.Optimizer().Config()
	cfg.ExternalGradients = false
	cpu, err := optimizer.New(context.Background(), single.New(buffer.Host, nil), cpu.New(2),
		gomlxinterop.OptimizerParams(tr.Params()), init, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cpu.Close() })
	return cpu
}

// samePieces checks that a and b hold the same masters, moments and
// gathered parameters, bit for bit.
func samePieces(t *testing.T, step int, params []gomlxinterop.Param, a, b *optimizer.Optimizer) {
	t.Helper()
	for _, p := range params {
		name := p.Name
		va, err := a.Param(name)
		if err != nil {
			t.Fatal(err)
		}
		vb, err := b.Param(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, bufs := range [][2]buffer.Buffer{{va.Data, vb.Data}, {va.ScaleInv, vb.ScaleInv}} {
			if bufs[0] == nil {
				continue
			}
			got := make([]byte, bufs[0].Len())
			if err := a.Backend().Read(got, bufs[0], 0); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, bufs[1].(buffer.HostBuffer)) {
				t.Fatalf("step %d: gathered %s differs from the CPU's", step, name)
			}
		}
	}
	pa, err := a.ReadPieces()
	if err != nil {
		t.Fatal(err)
	}
	pb, err := b.ReadPieces()
	if err != nil {
		t.Fatal(err)
	}
	if len(pa) != len(pb) {
		t.Fatalf("step %d: %d pieces, the CPU %d", step, len(pa), len(pb))
	}
	for i := range pa {
		for _, f := range [][2][]float32{{pa[i].Master, pb[i].Master}, {pa[i].M, pb[i].M}, {pa[i].V, pb[i].V}} {
			for k := range f[0] {
				if math.Float32bits(f[0][k]) != math.Float32bits(f[1][k]) {
					t.Fatalf("step %d: %s element %d: GPU %g, CPU %g", step, pa[i].Param, pa[i].Offset+k, f[0][k], f[1][k])
				}
			}
		}
	}
}

// TestGPUErrors checks the errors of a plugin that is not there and of an
// allocator XLA does not have (both also without a GPU), and of a GoMLX
// backend on another GPU than distopt's.
func TestGPUErrors(t *testing.T) {
	_, err := gomlxinterop.NewXLABackend(gomlxinterop.XLAConfig{PluginPath: "/nonexistent/xla_cuda_plugin.so"})
	if !errors.Is(err, gomlxinterop.ErrNoPlugin) {
		t.Errorf("missing plugin: %v, want ErrNoPlugin", err)
	}
	_, err = gomlxinterop.NewXLABackend(gomlxinterop.XLAConfig{Allocator: "arena"})
	if err == nil || !strings.Contains(err.Error(), `allocator "arena"`) {
		t.Errorf("unknown allocator: %v, want an error naming it", err)
	}
	be, xb := openGPU(t)
	if _, _, err := gomlxinterop.XLADevice(xb, be.Ordinal()); err != nil {
		t.Errorf("distopt's own GPU: %v", err)
	}
	if _, _, err := gomlxinterop.XLADevice(xb, be.Ordinal()+1); !errors.Is(err, gomlxinterop.ErrDevice) {
		t.Errorf("another GPU: %v, want ErrDevice", err)
	}
}

// TestGPUMemory checks that the XLA backend did not take the GPU's memory
// when it was made (no preallocation), and logs the device's use next to
// the planner's figure for the optimizer.
func TestGPUMemory(t *testing.T) {
	be, _ := openGPU(t)
	_, total, err := be.Device().MemInfo()
	if err != nil {
		t.Fatal(err)
	}
	if gpuSetup.xlaTook > total/8 {
		t.Errorf("making the XLA backend took %d of %d bytes", gpuSetup.xlaTook, total)
	}
	tr := newGPUTrainer(t, fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}, buffer.BFloat16)
	free, _, err := be.Device().MemInfo()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("XLA backend at creation: %d MiB; device in use with a trainer: %d MiB of %d; planner: %d bytes (%v)",
		gpuSetup.xlaTook>>20, (total-free)>>20, total>>20, tr.Optimizer().Report().Total(), tr.Optimizer().Report())
}
