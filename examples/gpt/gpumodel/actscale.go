package gpumodel

import (
	"encoding/binary"
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
	for _, b := range append(a.buffers(slots), devBuf{a.evalAmax, 4 * slots}) {
		if err := m.s.Memset32(b.p, 0, b.n/4); err != nil {
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

// actStateVersion heads DelayedActivationState's bytes.
const actStateVersion = 1

// DelayedActivationState returns the state of delayed activation scaling
// (Options.DelayedActivations) as bytes, for a checkpoint: the counts of
// training forwards and rolls, the histories, the amaxes the last
// training forward folded and the scales. A model given them by
// SetDelayedActivationState scales its next forwards as this one would.
// Nil without delayed activation scaling. It waits for the device.
func (m *Model) DelayedActivationState() ([]byte, error) {
	a := m.act
	if a == nil {
		return nil, nil
	}
	slots := len(actSlot) * m.cfg.Layers
	head := []uint64{actStateVersion, uint64(a.l), uint64(slots), uint64(a.passes), uint64(a.rolls), b2u64(a.rolled)}
	out := append([]byte(nil), cuda.Bytes(head)...)
	for _, b := range a.buffers(slots) {
		raw := make([]byte, b.n)
		if err := m.s.Download(raw, b.p); err != nil {
			return nil, err
		}
		out = append(out, raw...)
	}
	return out, nil
}

// SetDelayedActivationState restores what DelayedActivationState returned,
// from a model of the same shape and history length; other bytes are
// refused, naming what differs, and change nothing (a device error while
// uploading leaves the state undefined).
func (m *Model) SetDelayedActivationState(state []byte) error {
	a := m.act
	if a == nil {
		return fmt.Errorf("gpumodel: a delayed activation state for a model without Options.DelayedActivations")
	}
	slots := len(actSlot) * m.cfg.Layers
	bufs := a.buffers(slots)
	want := 6 * 8
	for _, b := range bufs {
		want += b.n
	}
	if len(state) != want {
		return fmt.Errorf("gpumodel: a delayed activation state of %d bytes, want %d (history %d, %d layers)", len(state), want, a.l, m.cfg.Layers)
	}
	var head [6]uint64
	for i := range head {
		head[i] = binary.LittleEndian.Uint64(state[8*i:])
	}
	if head[0] != actStateVersion || head[1] != uint64(a.l) || head[2] != uint64(slots) {
		return fmt.Errorf("gpumodel: a delayed activation state of version %d, history %d, %d slots; want version %d, history %d, %d slots",
			head[0], head[1], head[2], actStateVersion, a.l, slots)
	}
	// every training forward after the first rolls the histories once
	passes, rolls, rolled := head[3], head[4], head[5]
	if rolled > 1 || (rolled == 1) != (rolls > 0) || (passes > 0 && rolls != passes-1) || (passes == 0 && rolls != 0) {
		return fmt.Errorf("gpumodel: a delayed activation state of %d training forwards, %d rolls, rolled %d: inconsistent", passes, rolls, rolled)
	}
	at := 6 * 8
	for _, b := range bufs {
		if err := m.s.Upload(b.p, state[at:at+b.n]); err != nil {
			return err
		}
		at += b.n
	}
	a.passes, a.rolls, a.rolled = int(head[3]), int(head[4]), head[5] != 0
	return nil
}

// devBuf is a device buffer of n bytes.
type devBuf struct {
	p cuda.DevicePtr
	n int
}

// buffers lists the state's device buffers of slots slots, in the order of
// DelayedActivationState's bytes.
func (a *actScales) buffers(slots int) []devBuf {
	return []devBuf{{a.hist, 4 * slots * a.l}, {a.amax, 4 * slots}, {a.scale, 4 * slots}}
}

// b2u64 is 1 for true.
func b2u64(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}
