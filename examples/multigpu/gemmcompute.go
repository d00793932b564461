package main

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/gemm"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/gpu"
)

// gemmCompute is the computer of -compute gemm on a GPU: every linear
// layer (isGEMM) is a gemm.Linear on the optimizer backend's stream, so
// that the optimizer's waits and GradReady order themselves against it.
// Forward quantizes the layer's input and multiplies it by the gathered FP8
// weight, read in place; Backward quantizes the output gradient and runs
// the data gradient (the weight transposed transiently) and the weight
// gradient, written by the GEMM straight into the optimizer's gradient
// view. The other parameters' gradients (embeddings, norms, biases) are a
// device-to-device copy of the gradient's size into the view (their real
// kernels are not GEMMs).
//
// Activations are not chained through the layers: every layer reads the
// same random bfloat16 input (N(0, 1)) and output gradient (N(0, 2^-10)),
// sized for the widest layer, and writes its output and input gradient
// into shared buffers. A GEMM's time does not depend on where its operands
// come from; the random values keep the tensor cores' data-dependent power
// realistic and the gradients finite.
type gemmCompute struct {
	s      *cuda.Stream
	d      *cuda.Device
	eng    *gemm.Engine
	tokens int
	lins   map[int]*gemm.Linear
	x, dy  cuda.DevicePtr // inputs [tokens, widest in] and output gradients [tokens, widest out]
	y, dx  cuda.DevicePtr // outputs and input gradients
	dyLen  int            // bytes of dy
	allocs []cuda.DevicePtr
}

// dyStd is the standard deviation of the output gradients (the inputs':
// 1).
const dyStd = 1.0 / 1024

// expectedGEMMNorm is the gradient norm the random operands predict for
// the average of d ranks' gradients (every rank draws its own): a weight
// gradient's entries sum tokens products of independent N(0, 1) and
// N(0, dyStd^2) samples, micro times over (the same operands each
// micro-batch), so their mean square is micro^2 tokens dyStd^2; a copied
// gradient's entries are output-gradient samples, mean square dyStd^2 (the
// last micro-batch's). FP8 quantization of the operands changes the
// products by a few percent.
func expectedGEMMNorm(params []optimizer.Param, tokens, micro, d int) float64 {
	var sq float64
	for _, p := range params {
		n := float64(numElements(p.Shape))
		if isGEMM(p) {
			sq += n * float64(micro*micro) * float64(tokens) * dyStd * dyStd
		} else {
			sq += n * dyStd * dyStd
		}
	}
	return math.Sqrt(sq / float64(d))
}

// activationRecipes returns the recipes of a layer's input and output
// gradient for weights gathered with r: per tensor for per-tensor weights,
// 1x128 blocks for 128x128 tiles (the pairs Hopper's tensor cores take).
func activationRecipes(r fp8.Recipe) (x, dy fp8.Recipe, err error) {
	switch r.Scaling {
	case fp8.TensorCurrent, fp8.TensorDelayed:
		return fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}, fp8.Recipe{Format: fp8.E5M2, Scaling: fp8.TensorCurrent}, nil
	case fp8.Block128x128:
		return fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.Block1x128}, fp8.Recipe{Format: fp8.E5M2, Scaling: fp8.Block1x128}, nil
	}
	return fp8.Recipe{}, fp8.Recipe{}, fmt.Errorf("-compute gemm: recipe %v: Hopper's FP8 tensor cores read per-tensor (current, delayed) or 128x128 tile (tile) weights only", r)
}

// newGEMMCompute makes the layers of params' GEMMs over tokens rows on
// gb's device and stream, and fills the activations from seed.
func newGEMMCompute(gb *gpu.Backend, params []optimizer.Param, r fp8.Recipe, tokens int, seed uint64) (_ *gemmCompute, err error) {
	xr, dyr, err := activationRecipes(r)
	if err != nil {
		return nil, err
	}
	eng, err := gemm.New(gb.Device(), gb.Stream())
	if err != nil {
		return nil, err
	}
	c := &gemmCompute{s: gb.Stream(), d: gb.Device(), eng: eng, tokens: tokens, lins: map[int]*gemm.Linear{}}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Close())
		}
	}()
	widestIn, widestOut := 16, 16
	for i, p := range params {
		if !isGEMM(p) {
			continue
		}
		l, err := eng.NewLinear(gemm.LinearConfig{In: p.Shape[1], Out: p.Shape[0], X: xr, DY: dyr})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.Name, err)
		}
		c.lins[i] = l
		widestIn, widestOut = max(widestIn, p.Shape[1]), max(widestOut, p.Shape[0])
	}
	c.dyLen = 2 * tokens * widestOut
	for _, b := range []struct {
		p   *cuda.DevicePtr
		n   int
		std float64
	}{{&c.x, 2 * tokens * widestIn, 1}, {&c.dy, c.dyLen, dyStd}, {&c.y, c.dyLen, 0}, {&c.dx, 2 * tokens * widestIn, 0}} {
		if *b.p, err = c.alloc(b.n); err != nil {
			return nil, err
		}
		if b.std != 0 {
			if err := c.fill(*b.p, b.n, b.std, seed); err != nil {
				return nil, err
			}
			seed++
		}
	}
	return c, c.s.Synchronize()
}

func (c *gemmCompute) alloc(n int) (cuda.DevicePtr, error) {
	p, err := c.d.Alloc(n)
	if err == nil {
		c.allocs = append(c.allocs, p)
	}
	return p, err
}

// fillPeriod is the number of samples fill draws on the host: a prime, so
// that the repeats do not line up with the rows of any layer's operands.
const fillPeriod = 1048573

// fill writes n bytes of bfloat16 N(0, std^2) samples at p: fillPeriod
// drawn on the host, repeated on the device.
func (c *gemmCompute) fill(p cuda.DevicePtr, n int, std float64, seed uint64) error {
	r := rand.New(rand.NewPCG(seed, 0xac7))
	chunk := make([]byte, min(n, 2*fillPeriod))
	for i := 0; i+1 < len(chunk); i += 2 {
		b := fp8.BF16FromFloat32(float32(std * r.NormFloat64()))
		chunk[i], chunk[i+1] = byte(b), byte(b>>8)
	}
	if err := c.s.Upload(p, chunk); err != nil {
		return err
	}
	for done := len(chunk); done < n; {
		k := min(done, n-done)
		if err := c.s.CopyDtoD(p.Add(done), p, k); err != nil {
			return err
		}
		done += k
	}
	return nil
}

// Forward implements computer.
func (c *gemmCompute) Forward(i int, w optimizer.ParamView) error {
	op, err := weight(w)
	if err != nil {
		return err
	}
	_, err = c.lins[i].Forward(gemm.BF16(c.y), c.x, c.tokens, op)
	return err
}

// Backward implements computer.
func (c *gemmCompute) Backward(i int, w optimizer.ParamView, g optimizer.GradView, accumulate bool) error {
	op, err := weight(w)
	if err != nil {
		return err
	}
	out, err := gemm.Gradient(g.Data, g.DType, accumulate)
	if err != nil {
		return fmt.Errorf("%s: %w", g.Name, err)
	}
	_, _, err = c.lins[i].Backward(gemm.BF16(c.dx), out, c.dy, op)
	return err
}

// weight returns the operand of the gathered FP8 weight w, read in place.
func weight(w optimizer.ParamView) (gemm.Operand, error) {
	op, err := gemm.Weight(w.Data, w.ScaleInv, w.Shape, w.Recipe)
	if err != nil {
		return gemm.Operand{}, fmt.Errorf("%s: %w", w.Name, err)
	}
	return op, nil
}

// WriteGrad implements computer: a copy of the gradient's size from the
// output gradients into the view (accumulate makes no difference: a write
// of the same size either way).
func (c *gemmCompute) WriteGrad(i int, g optimizer.GradView, accumulate bool) error {
	b, ok := g.Data.(buffer.DeviceBuffer)
	if !ok {
		return fmt.Errorf("gradient of %q is not in device memory", g.Name)
	}
	dst := cuda.DevicePtr(b.Ptr)
	for off := 0; off < b.Size; off += c.dyLen {
		if err := c.s.CopyDtoD(dst.Add(off), c.dy, min(c.dyLen, b.Size-off)); err != nil {
			return err
		}
	}
	return nil
}

// KeptBytes is the FP8 activations the layers hold between forward and
// backward, and Scratch the engine's shared buffers.
func (c *gemmCompute) KeptBytes() (kept, scratch int) {
	for _, l := range c.lins {
		kept += l.KeptBytes()
	}
	return kept, c.eng.ScratchBytes() + c.eng.ActivationScratch() + gemm.WorkspaceBytes
}

// Close releases the layers, the engine and the activations.
func (c *gemmCompute) Close() error {
	var errs []error
	for _, l := range c.lins {
		errs = append(errs, l.Release())
	}
	errs = append(errs, c.eng.Close())
	for _, p := range c.allocs {
		errs = append(errs, c.d.Free(p))
	}
	c.allocs = nil
	return errors.Join(errs...)
}

// eventClock is the clock of the GPU backend: timing events recorded on
// its stream, reused from one Read to the next.
type eventClock struct {
	d      *cuda.Device
	s      *cuda.Stream
	events []*cuda.Event
	used   int
}

// Mark implements clock.
func (c *eventClock) Mark() error {
	if c.used == len(c.events) {
		e, err := c.d.NewEvent(true)
		if err != nil {
			return err
		}
		c.events = append(c.events, e)
	}
	c.used++
	return c.events[c.used-1].Record(c.s)
}

// Read implements clock.
func (c *eventClock) Read() ([]float64, error) {
	defer func() { c.used = 0 }()
	if c.used == 0 {
		return nil, nil
	}
	if err := c.events[c.used-1].Synchronize(); err != nil {
		return nil, err
	}
	var errs []error
	ms := intervals(c.used, func(i int) float64 {
		d, err := cuda.Elapsed(c.events[i], c.events[i+1])
		errs = append(errs, err)
		return float64(d.Nanoseconds()) / 1e6
	})
	return ms, errors.Join(errs...)
}

// Close destroys the events.
func (c *eventClock) Close() error {
	var errs []error
	for _, e := range c.events {
		errs = append(errs, e.Destroy())
	}
	c.events = nil
	return errors.Join(errs...)
}
