package cudnn

import (
	"errors"
	"fmt"

	"github.com/distopt/distopt/cuda"
)

// Config is what an Attention is built for.
type Config struct {
	Shape
	Layout Layout
	// Scale multiplies q·kᵀ (usually 1/sqrt(D)).
	Scale float32
	// MaxWorkspace bounds the workspace of the plans in bytes; engines
	// that need more are passed over. Zero means DefaultMaxWorkspace.
	MaxWorkspace int
	// Deterministic passes over engines that carry cuDNN's nondeterministic
	// numerical note. New fails with ErrNotSupported, naming the reason,
	// when no engine is left. It is not enough for repeatable bits: with
	// cuDNN 9.14 on an H100 and an H200 the engine left still gave a
	// backward whose dq differed between runs in a few elements
	// (TestRepeatableGPU), because dq is accumulated across key blocks.
	Deterministic bool
	// Repeatable builds the backward pass in the form whose dq is written
	// by one product from the score gradient kept in the workspace
	// (backwardGraph), as cudnn-frontend does for deterministic attention,
	// instead of accumulated in float32 across key blocks. The workspace
	// grows by the score gradient (scoreGradBytes: 512 MiB at 4 x 16 heads
	// x 2048) and loses dq's accumulator.
	Repeatable bool
}

// DefaultMaxWorkspace is the workspace bound of a zero Config.MaxWorkspace.
const DefaultMaxWorkspace = 64 << 20

func (c Config) maxWorkspace() int {
	if c.MaxWorkspace > 0 {
		return c.MaxWorkspace
	}
	return DefaultMaxWorkspace
}

// planWorkspace bounds the workspace of c's plans: MaxWorkspace, and
// with Repeatable the score gradient besides.
func (c Config) planWorkspace() int {
	if c.Repeatable {
		return c.maxWorkspace() + scoreGradBytes(c.Shape)
	}
	return c.maxWorkspace()
}

// WorkspaceBytes is the device memory New allocates for c: the plans'
// workspace bound (with Repeatable, the score gradient's included), the
// float32 row sums of do∘o [batch, head, seq] and, without Repeatable,
// the float32 accumulator of dq [batch, head, seq, d] of the backward
// pass. It depends on the shapes only, not on the engine cuDNN picks.
func WorkspaceBytes(c Config) int {
	rows := c.Batch * c.Heads * c.Seq
	n := c.planWorkspace() + 4*rows
	if !c.Repeatable {
		n += 4 * rows * c.D
	}
	return n
}

// StatsBytes is the size of the float32 statistics Forward writes and
// Backward reads: one per row of every head, packed [batch, head, seq].
func StatsBytes(s Shape) int { return 4 * s.Batch * s.Heads * s.Seq }

// Attention is causal scaled-dot-product attention of one Config on one
// device with cuDNN's fused flash attention: bfloat16 q, k, v, o and
// gradients, float32 softmax and accumulation. Its plans are built once,
// in New. Its methods must not be called concurrently.
type Attention struct {
	lib      *Library
	d        *cuda.Device
	c        Config
	h        uintptr // the cudnnHandle_t
	fwd, bwd *plan
	ws       cuda.DevicePtr // the plans' workspace, then the row sums, then dq's accumulator (accumulating form only)
}

// New builds the forward and backward plans of c on device d and
// allocates their workspace (WorkspaceBytes). Shapes cuDNN's engines do
// not take give an error matching ErrNotSupported that carries cuDNN's
// reasons where it gives them.
func New(l *Library, d *cuda.Device, c Config) (*Attention, error) {
	if err := c.check(l); err != nil {
		return nil, err
	}
	a := &Attention{lib: l, d: d, c: c}
	err := d.Do(func() error {
		h, s := l.fns.create()
		if err := l.check("cudnnCreate", s); err != nil {
			return err
		}
		a.h = h
		var err error
		mask := maskValue(l.version)
		if a.fwd, err = newPlan(l, h, forwardGraph(c.Shape, c.Layout, c.Scale, mask), c.maxWorkspace(), c.Deterministic); err != nil {
			return fmt.Errorf("%w (%v, forward)", err, c.Shape)
		}
		if a.bwd, err = newPlan(l, h, backwardGraph(c.Shape, c.Layout, c.Scale, mask, c.Repeatable), c.planWorkspace(), c.Deterministic); err != nil {
			return fmt.Errorf("%w (%v, backward)", err, c.Shape)
		}
		return nil
	})
	if err == nil {
		a.ws, err = d.Alloc(WorkspaceBytes(c))
	}
	if err != nil {
		return nil, errors.Join(err, a.Close())
	}
	return a, nil
}

// check refuses what is known before cuDNN is asked.
func (c Config) check(l *Library) error {
	if c.Batch < 1 || c.Heads < 1 || c.Seq < 1 || c.D < 1 {
		return fmt.Errorf("%w: attention of %v: sizes must be positive", ErrNotSupported, c.Shape)
	}
	if c.D%8 != 0 {
		return fmt.Errorf("%w: attention of %v: cuDNN's fused attention takes head widths that are multiples of 8", ErrNotSupported, c.Shape)
	}
	// Before 9.16 the backward pass of a sequence that is not a multiple of
	// 128 needs a padding mask this graph does not have.
	if c.Seq%128 != 0 && l.version < 91600 {
		return fmt.Errorf("%w: attention of %v: %v needs sequences that are multiples of 128", ErrNotSupported, c.Shape, l)
	}
	for _, s := range [][4]int64{c.Layout.QKV, c.Layout.O, c.Layout.Grad} {
		if s[3] != 1 {
			return fmt.Errorf("%w: layout %+v: the stride of d must be 1", ErrNotSupported, c.Layout)
		}
	}
	return nil
}

// Workspace returns the workspace bytes the forward and backward plans
// chose (at most the bound).
func (a *Attention) Workspace() (fwd, bwd int) { return a.fwd.workspace, a.bwd.workspace }

// ForwardArgs are the buffers of Forward: bfloat16 Q, K, V (read) and O
// (written) in the Config's layout, each at its own base, and the float32
// statistics (StatsBytes, written).
type ForwardArgs struct{ Q, K, V, O, Stats cuda.DevicePtr }

// BackwardArgs are the buffers of Backward: Forward's, the bfloat16
// gradient DO of O (read) and the bfloat16 gradients DQ, DK, DV
// (overwritten).
type BackwardArgs struct{ Q, K, V, O, DO, Stats, DQ, DK, DV cuda.DevicePtr }

// Forward queues o = softmax(scale·q·kᵀ, causal)·v and the statistics on s.
func (a *Attention) Forward(s *cuda.Stream, t ForwardArgs) error {
	ptrs := map[int64]cuda.DevicePtr{uidQ: t.Q, uidK: t.K, uidV: t.V, uidO: t.O, uidStats: t.Stats}
	return a.run(s, a.fwd, ptrs)
}

// Backward queues dq, dk, dv from q, k, v, o, do and Forward's statistics
// on s.
func (a *Attention) Backward(s *cuda.Stream, t BackwardArgs) error {
	rows := a.c.Batch * a.c.Heads * a.c.Seq
	sum := a.ws.Add(a.c.planWorkspace())
	ptrs := map[int64]cuda.DevicePtr{uidQ: t.Q, uidK: t.K, uidV: t.V, uidO: t.O, uidDO: t.DO, uidStats: t.Stats,
		uidDQ: t.DQ, uidDK: t.DK, uidDV: t.DV, uidSoftmaxSum: sum}
	if a.c.Repeatable { // no accumulator: dq is one product
		return a.run(s, a.bwd, ptrs)
	}
	acc := a.ws.Add(a.c.planWorkspace() + 4*rows)
	ptrs[uidDQAccum] = acc
	if a.lib.version < 90600 { // before 9.6 the accumulator starts from what it holds
		if err := s.Memset32(acc, 0, rows*a.c.D); err != nil {
			return err
		}
	}
	return a.run(s, a.bwd, ptrs)
}

// run checks the alignment of ptrs and queues p on s.
func (a *Attention) run(s *cuda.Stream, p *plan, ptrs map[int64]cuda.DevicePtr) error {
	addrs := make(map[int64]uintptr, len(ptrs))
	for u, v := range ptrs {
		if v == 0 || v%tensorAlignment != 0 {
			return fmt.Errorf("cudnn: %s: buffer %#x of tensor %d is not %d-byte aligned", p.g.name, uint64(v), u, tensorAlignment)
		}
		addrs[u] = uintptr(v)
	}
	return a.d.Do(func() error { return p.run(s.Handle(), addrs, uintptr(a.ws)) })
}

// Close destroys the plans and the handle and frees the workspace;
// nil-safe, and a second Close does nothing. Work queued earlier must be
// finished or waited for first.
func (a *Attention) Close() error {
	if a == nil || a.d == nil { // nil, or closed already (Close zeroes a)
		return nil
	}
	var errs []error
	if a.ws != 0 {
		errs = append(errs, a.d.Free(a.ws))
	}
	errs = append(errs, a.d.Do(func() error {
		a.fwd.destroy()
		a.bwd.destroy()
		if a.h != 0 {
			return a.lib.check("cudnnDestroy", a.lib.fns.destroy(a.h))
		}
		return nil
	}))
	*a = Attention{}
	return errors.Join(errs...)
}
