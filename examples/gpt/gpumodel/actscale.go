package gpumodel

import (
	"fmt"

	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/examples/gpt/kernels"
	"github.com/distopt/distopt/examples/gpt/model"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/gemm"
)

// Delayed scaling of the activations (Options.DelayedActivations), after
// Transformer Engine's delayed recipe, with two differences: each rank
// keeps its own histories (TE reduces the amaxes over the ranks by
// default; here every rank's activations were already scaled from its own
// amax), and the first training forward scales from its own amax where TE
// starts from a scale of 1. The FP8 inputs that the
// fused forward's LayerNorm and GELU kernels write (attn.qkv's, mlp.fc's
// and mlp.proj's) are cast in one pass with a scale derived from the
// amaxes of earlier training forwards, and each pass folds its own amax
// for the next. Current scaling needs a pass that reads the tensor only
// for its amax: per block, LayerNorm 1 and 2 read their float32 input
// twice and GELU reads fc twice (about 16 x tokens x hidden bytes a block
// at FFN = 4 x hidden). The attention output's cast (gemm's, in
// attn.proj) and the output gradients' stay current.
//
// The first training forward scales from its own amaxes (current
// scaling) and seeds the histories; each later one first rolls them
// (kernels.GPTActScales: the last training forward's amaxes appended, the
// scales from each history's largest). An evaluation forward (dloss 0)
// casts with the scales of the last training forward (current scaling
// before the second) but folds its amaxes where nothing reads them, so
// evaluations do not change training.

// actSlot numbers the delayed activations of a block by the linear layer
// they feed: LayerNorm 1's output (attn.qkv), LayerNorm 2's (mlp.fc),
// GELU's (mlp.proj).
var actSlot = map[int]int{qkvL: 0, fcL: 1, outL: 2}

// actScales is the state of delayed activation scaling on the device.
type actScales struct {
	l        int            // history length
	hist     cuda.DevicePtr // uint32 [slots, l] amax keys, a ring per slot (zeroed at first)
	amax     cuda.DevicePtr // uint32 [slots]: what training forwards fold
	evalAmax cuda.DevicePtr // uint32 [slots]: what evaluation forwards fold (never read)
	scale    cuda.DevicePtr // float32 [slots]: the scales of the next forward
	passes   int            // training forwards so far
	rolls    int            // rolls of the histories so far; the next writes position rolls mod l
	rolled   bool           // scale holds scales (a training forward after the first rolled the histories)
	training bool           // the forward running is a training one
}

// actScaleBytes is what delayed activation scaling holds on the device.
func actScaleBytes(cfg model.Config, o Options) int {
	if o.DelayedActivations <= 0 {
		return 0
	}
	return 4 * len(actSlot) * cfg.Layers * (o.DelayedActivations + 3)
}

// allocActScales makes the state of delayed activation scaling with buf
// (no state without Options.DelayedActivations); zeroActScales zeroes it.
func (m *Model) allocActScales(buf func(cat, bytes int) cuda.DevicePtr) {
	l := m.opts.DelayedActivations
	if l <= 0 {
		return
	}
	slots := len(actSlot) * m.cfg.Layers
	m.act = &actScales{l: l, hist: buf(catFinal, 4*slots*l), amax: buf(catFinal, 4*slots), evalAmax: buf(catFinal, 4*slots), scale: buf(catFinal, 4*slots)}
}

// zeroActScales zeroes the histories and amaxes (device memory is not
// cleared when allocated): a history starts as zeros, which no amax key
// exceeds.
func (m *Model) zeroActScales() error {
	a := m.act
	if a == nil {
		return nil
	}
	slots := len(actSlot) * m.cfg.Layers
	for _, z := range []struct {
		p cuda.DevicePtr
		n int
	}{{a.hist, slots * a.l}, {a.amax, slots}, {a.evalAmax, slots}, {a.scale, slots}} {
		if err := m.s.Memset32(z.p, 0, z.n); err != nil {
			return err
		}
	}
	return nil
}

// startActScales begins a forward pass for delayed activation scaling:
// a training one (dloss not 0) after the first rolls the histories and
// derives the scales it casts with.
func (m *Model) startActScales(dloss float64) error {
	a := m.act
	if a == nil {
		return nil
	}
	x, _, err := ActivationRecipes(m.opts.Recipe)
	if err != nil {
		return err
	}
	if x.Scaling != fp8.TensorCurrent {
		return fmt.Errorf("gpumodel: Options.DelayedActivations scales per tensor; the weights' recipe %v gives activations of recipe %v", m.opts.Recipe, x)
	}
	a.training = dloss != 0
	if !a.training || a.passes == 0 {
		return nil
	}
	if err := m.k.GPTActScales(m.s, a.scale, a.hist, a.amax, len(actSlot)*m.cfg.Layers, a.l, a.rolls%a.l, x); err != nil {
		return err
	}
	a.rolls++
	a.rolled = true
	return nil
}

// endActScales counts a finished training forward.
func (m *Model) endActScales() {
	if m.act != nil && m.act.training {
		m.act.passes++
	}
}

// actOut returns the FP8 input q of linear layer i of block l as the
// fused kernels write it, and the amax word they fold into: with delayed
// activation scaling, the layer's scale once the histories were rolled
// (before that, current scaling, as the first training forward), and the
// slot's amax (an evaluation's, which nothing reads, outside training);
// otherwise the shared word of current scaling.
func (m *Model) actOut(l, i int, q gemm.Operand) (kernels.FP8Out, cuda.DevicePtr) {
	out := kernels.FP8Out{Data: q.Data, ScaleInv: q.ScaleInv, Recipe: m.layers[l].lin[i].Config().X} // in the layer's recipe
	a := m.act
	if a == nil {
		return out, m.amax
	}
	at := cuda.DevicePtr(4 * (len(actSlot)*l + actSlot[i]))
	if a.rolled {
		out.Scale = a.scale + at
	}
	if a.training {
		return out, a.amax + at
	}
	return out, a.evalAmax + at
}
