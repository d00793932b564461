package gpumodel

import (
	"fmt"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/examples/gpt/kernels"
	"github.com/distopt/distopt/examples/gpt/model"
)

// gradSumLayout returns, for bfloat16 gradient views (Options.GradType),
// where each small parameter's float32 sum lies in the model's scratch
// m.gsum: its offset and length in floats, by name, and the floats in all.
// The small parameters are the high-precision ones (biases, LayerNorms,
// embeddings): the kernels sum their gradients in float32. The linear
// weights have none: their GEMMs round into the views themselves.
func gradSumLayout(cfg model.Config) (at map[string][2]int, total int) {
	at = map[string][2]int{}
	for _, p := range cfg.Params() {
		if !p.HighPrecision {
			continue
		}
		n := 1
		for _, d := range p.Shape {
			n *= d
		}
		at[p.Name] = [2]int{total, n}
		total += n
	}
	return at, total
}

// gradType returns the type of the gradient views (Options.GradType,
// Float32 when zero).
func (o Options) gradType() buffer.DType {
	if o.GradType == 0 {
		return buffer.Float32
	}
	return o.GradType
}

// bf16Grads reports whether the gradient views are bfloat16.
func (o Options) bf16Grads() bool { return o.GradType == buffer.BFloat16 }

// viewPtr returns the device address of the named gradient view, which
// must be of type t in device memory.
func viewPtr(grads Grads, name string, t buffer.DType) (cuda.DevicePtr, error) {
	v, err := grads(name)
	if err != nil {
		return 0, err
	}
	b, ok := v.Data.(buffer.DeviceBuffer)
	if v.DType != t || !ok {
		return 0, fmt.Errorf("gpumodel: the gradient of %s must be %v in device memory (is %v; Options.GradType)", name, t, v.DType)
	}
	return cuda.DevicePtr(b.Ptr), nil
}

// gradSum returns where the kernels accumulate the float32 gradient of
// the small parameter name: its view with float32 views; with bfloat16
// ones its sum in m.gsum, which gradsDone adds into the view.
func (m *Model) gradSum(grads Grads, name string) (cuda.DevicePtr, error) {
	p, err := viewPtr(grads, name, m.opts.gradType())
	if err != nil || !m.opts.bf16Grads() {
		return p, err
	}
	at, ok := m.gsumAt[name]
	if !ok {
		return 0, fmt.Errorf("gpumodel: %s is no small parameter of the model", name)
	}
	return m.gsum.Add(4 * at[0]), nil
}

// clearGradSums zeroes the float32 sums of the small parameters before a
// Backward, with bfloat16 views.
func (m *Model) clearGradSums() error {
	if !m.opts.bf16Grads() {
		return nil
	}
	return m.s.Memset32(m.gsum, 0, m.gsumLen)
}

// gradsDone, once the last writes of the named gradients are queued,
// queues view = bf16(view + sum) for each small parameter among them with
// bfloat16 views: the micro-batch's float32 gradient added with one
// rounding to nearest even, a layer's in one launch
// (kernels.GPTAccumulateBF16s). It does nothing otherwise.
func (m *Model) gradsDone(grads Grads, names []string) error {
	if !m.opts.bf16Grads() {
		return nil
	}
	var sums []kernels.BF16Sum
	for _, name := range names {
		at, ok := m.gsumAt[name]
		if !ok {
			continue
		}
		p, err := viewPtr(grads, name, buffer.BFloat16)
		if err != nil {
			return err
		}
		sums = append(sums, kernels.BF16Sum{View: p, Sum: m.gsum.Add(4 * at[0]), N: at[1]})
	}
	return m.k.GPTAccumulateBF16s(m.s, sums)
}
