package hier

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
)

// ErrConfig marks group and cross communicators that cannot form a Comm.
var ErrConfig = errors.New("invalid configuration")

// Comm is one rank of a hierarchical world (see the package documentation).
type Comm struct {
	group, cross collective.Communicator

	launchMu sync.Mutex // serializes the launches of cross phases
	mu       sync.Mutex // guards pending
	pending  []*work    // works whose cross phase has not been started, in start order
}

// New returns the hierarchical communicator of a rank whose group
// communicator is group and whose cross-group communicator is cross. Both
// must take the same kind of memory. The Comm owns neither: Close closes
// both.
func New(group, cross collective.Communicator) (*Comm, error) {
	if group == nil || cross == nil {
		return nil, fmt.Errorf("hier: nil communicator: %w", ErrConfig)
	}
	if group.Memory() != cross.Memory() {
		return nil, fmt.Errorf("hier: group communicator takes %s memory, cross-group communicator %s: %w", group.Memory(), cross.Memory(), ErrConfig)
	}
	return &Comm{group: group, cross: cross}, nil
}

// Rank is this rank's index within its group.
func (c *Comm) Rank() int { return c.group.Rank() }

// Size is the group size g.
func (c *Comm) Size() int { return c.group.Size() }

// Memory is the kind of buffer both communicators take.
func (c *Comm) Memory() buffer.MemoryKind { return c.group.Memory() }

// Group returns the communicator of this rank's group.
func (c *Comm) Group() collective.Communicator { return c.group }

// Cross returns the communicator across groups (its rank is the index of
// this rank's group, its size the number of groups).
func (c *Comm) Cross() collective.Communicator { return c.cross }

// GlobalRank is the rank in the whole job: group index x g + rank in the
// group.
func (c *Comm) GlobalRank() int { return c.cross.Rank()*c.group.Size() + c.group.Rank() }

// Leader reports whether this rank belongs to group 0, the group that
// writes checkpoints (see the package documentation).
func (c *Comm) Leader() bool { return c.cross.Rank() == 0 }

// Close closes the group and the cross-group communicators.
func (c *Comm) Close() error { return errors.Join(c.group.Close(), c.cross.Close()) }

// Start starts ops within the group. A reduce-scatter among them is then
// all-reduced across the groups with the same reduction: Sum and Max as
// they are, Avg as the average of the groups' averages (the groups are of
// equal size, so that is the average over all ranks).
func (c *Comm) Start(ops ...collective.Op) collective.Work {
	w := &work{c: c, first: c.group.Start(ops...)}
	for _, op := range ops {
		if op.Kind == collective.OpReduceScatter {
			w.second = append(w.second, collective.Op{Kind: collective.OpAllReduce, Dst: op.Dst, Src: op.Dst, DType: op.DType, Reduce: op.Reduce})
		}
	}
	if len(w.second) > 0 {
		c.mu.Lock()
		c.pending = append(c.pending, w)
		c.mu.Unlock()
	}
	return w
}

// work is a started group of operations: the group phase (first) and,
// when it holds reduce-scatters, their cross-group all-reduces (second),
// started by launch.
type work struct {
	c      *Comm
	first  collective.Work
	second []collective.Op

	once      sync.Once
	crossWork collective.Work // set by launch
	err       error           // of the group phase, set by launch
}

// launch waits for the group phase and starts the cross phase (once).
func (w *work) launch(ctx context.Context) error {
	w.once.Do(func() {
		if w.err = w.first.Wait(ctx); w.err != nil {
			w.err = w.c.groupErr(w.err)
			return
		}
		w.crossWork = w.c.cross.Start(w.second...)
	})
	return w.err
}

// Wait waits for the group phase, starts the cross phases of this work and
// of every earlier one still pending (in start order), and waits for this
// work's cross phase.
func (w *work) Wait(ctx context.Context) error {
	if len(w.second) == 0 {
		if err := w.first.Wait(ctx); err != nil {
			return w.c.groupErr(err)
		}
		return nil
	}
	if err := w.c.launchUpTo(ctx, w); err != nil {
		return err
	}
	if err := w.crossWork.Wait(ctx); err != nil {
		return w.c.crossErr(err)
	}
	return nil
}

// launchUpTo launches the cross phases of the pending works up to and
// including w, in start order. Launches are serialized by launchMu; mu
// guards only the pending list, so that Start never waits for a launch.
func (c *Comm) launchUpTo(ctx context.Context, w *work) error {
	c.launchMu.Lock()
	defer c.launchMu.Unlock()
	for {
		c.mu.Lock()
		if len(c.pending) == 0 {
			c.mu.Unlock()
			return w.launch(ctx) // launched by an earlier Wait: its result
		}
		p := c.pending[0]
		c.pending = c.pending[1:]
		c.mu.Unlock()
		err := p.launch(ctx)
		if p == w {
			return err
		}
		if err != nil {
			return fmt.Errorf("hier: an earlier operation failed: %w", err)
		}
	}
}

// groupErr is the error of the group phase, err. When err names a rank of
// the group (a *collective.RankError), the error is a RankError that names
// that rank's global rank and wraps err; errors.As finds it first.
func (c *Comm) groupErr(err error) error {
	return globalize(err, "within the group", func(r int) int { return c.cross.Rank()*c.group.Size() + r })
}

// crossErr is groupErr for the cross-group phase: rank r of the
// cross-group is rank Rank() of group r.
func (c *Comm) crossErr(err error) error {
	return globalize(err, "across the groups", func(r int) int { return r*c.group.Size() + c.group.Rank() })
}

// globalize wraps err of phase, naming the global rank (global) of the
// rank it names, if any.
func globalize(err error, phase string, global func(int) int) error {
	var re *collective.RankError
	if !errors.As(err, &re) {
		return fmt.Errorf("hier: %s: %w", phase, err)
	}
	return &collective.RankError{Rank: global(re.Rank), Op: re.Op, Err: fmt.Errorf("hier: %s (its rank %d there): %w", phase, re.Rank, err)}
}
