package tests

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/checkpoint"
)

// The program of the README's "The compiled example" section: the lines between the
// README markers are the README's snippet, character for character
// (TestReadmeSnippet compares them).

// The model: y = W x + b, W 16x32 (gathered in FP8), b 16 (BF16), fitted
// to a fixed teacher; every rank sees its own batch.
const (
	inDim, outDim, batch = 32, 16, 8
)

var params = []optimizer.Param{
	{Name: "layer0.w", Shape: []int{outDim, inDim}},
	{Name: "layer0.b", Shape: []int{outDim}, HighPrecision: true, NoDecay: true},
}

// forwardBackward returns the mean squared error of rank's batch at step
// and the gradients of W and b.
func forwardBackward(w, b []float32, rank, step int) (loss float64, gw, gb []float32) {
	gw, gb = make([]float32, len(w)), make([]float32, len(b))
	for n := range batch {
		x := make([]float32, inDim)
		for k := range x {
			x[k] = float32((rank*7+step*3+n*5+k)%11)/11 - 0.5
		}
		for j := range outDim {
			y, target := b[j], float32(j%3)-1
			for k := range inDim {
				y += w[j*inDim+k] * x[k]
				target += 0.25 * float32((j+k)%5-2) * x[k]
			}
			e := (y - target) / batch
			loss += float64((y-target)*(y-target)) / batch / outDim
			gb[j] += e
			for k := range inDim {
				gw[j*inDim+k] += e * x[k]
			}
		}
	}
	return loss, gw, gb
}

// README:begin
func train(ctx context.Context, comm collective.Communicator, initialWeights map[string][]float32, dir string) (float64, error) {
	be := cpu.New(0) // on GPUs: gpu.SetupFromEnv gives the backend and NCCL communicator of LOCAL_RANK
	o, err := optimizer.New(ctx, comm, be, params, optimizer.FromMap(initialWeights), optimizer.Config{
		LR:          optimizer.WarmupCosine{Peak: 3e-2, Min: 3e-3, Warmup: 10, Total: 100},
		WeightDecay: 0.1,
		MaxGradNorm: 1,
		Recipe:      fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent},
	})
	if err != nil {
		return 0, err
	}
	defer o.Close()
	var loss float64
	for step := range 100 {
		w, _ := o.Weights("layer0.w") // the gathered FP8 bytes times scale_inv (o.Param: the bytes themselves)
		b, _ := o.Weights("layer0.b") // the BF16 copy, as float32
		var gw, gb []float32
		loss, gw, gb = forwardBackward(w, b, comm.Rank(), step) // this rank's batch
		// SetGrad copies float32 gradients from the host (rounded to BF16); a GPU
		// framework writes BF16 into o.Grad(name).Data, device memory, itself.
		if err := errors.Join(o.SetGrad("layer0.w", gw), o.SetGrad("layer0.b", gb)); err != nil {
			return 0, err
		}
		if _, err := o.Step(ctx); err != nil { // reduce-scatter, norm+clip, AdamW, amax, cast, all-gather
			return 0, err
		}
	}
	_, err = checkpoint.Save(ctx, o, comm, dir, checkpoint.SaveOptions{}) // loadable at any d
	return loss, err
}

// README:end

func Example_readme() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "readme")
	defer os.RemoveAll(dir)
	initialWeights := map[string][]float32{"layer0.w": make([]float32, outDim*inDim), "layer0.b": make([]float32, outDim)}
	const d = 4
	// README:begin
	comms := inproc.Communicators(d) // ONE world of d ranks, made before the ranks start
	losses, errs := make([]float64, d), make([]error, d)
	var wg sync.WaitGroup
	for rank := range d {
		wg.Go(func() { losses[rank], errs[rank] = train(ctx, comms[rank], initialWeights, dir) })
	}
	wg.Wait()
	// One process per rank instead (distopt run or torchrun): rendezvous.FromEnv,
	// rendezvous.Connect, then grpccomm.New (CPU) or nccl.New (GPU) for comm.
	// README:end
	l0, _, _ := forwardBackward(initialWeights["layer0.w"], initialWeights["layer0.b"], 0, 99)
	fmt.Printf("errors: %v\nrank 0 loss: %.4f at the start, %.4f after 100 steps\n", errors.Join(errs...), l0, losses[0])
	_, err := os.Stat(filepath.Join(dir, "latest"))
	fmt.Println("checkpoint saved:", err == nil)
	// Output:
	// errors: <nil>
	// rank 0 loss: 0.9407 at the start, 0.0008 after 100 steps
	// checkpoint saved: true
}
