package inproc

import (
	"context"
	"fmt"
	"sync"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
)

// Comm is one rank of an in-process world. It implements
// collective.Communicator.
type Comm struct {
	w    *world
	rank int

	// Guarded by w.mu.
	seq    uint64
	closed bool
}

var _ collective.Communicator = (*Comm)(nil)

// New returns the n ranks of a new in-process world as *Comm; element r is
// rank r. The world runs one executor goroutine until a rank is closed or
// the world is aborted: close every rank when done. New panics if n < 1.
//
// Deprecated: use Communicators, which returns the same ranks as the
// collective.Communicator values every consumer takes.
func New(n int) []*Comm {
	if n < 1 {
		panic(fmt.Sprintf("inproc: world of %d ranks", n))
	}
	w := &world{
		n:      n,
		rounds: make(map[uint64]*round),
		kick:   make(chan struct{}, 1),
		abortc: make(chan struct{}),
		exited: make(chan struct{}),
	}
	comms := make([]*Comm, n)
	for r := range comms {
		comms[r] = &Comm{w: w, rank: r}
	}
	go w.run()
	return comms
}

// Communicators returns the n ranks of a new in-process world; element r
// is rank r. The world runs one executor goroutine until a rank is closed
// or the world is aborted: close every rank when done. It panics if n < 1:
// check a rank count that comes from a user first.
func Communicators(n int) []collective.Communicator {
	cs := New(n)
	out := make([]collective.Communicator, n)
	for i, c := range cs {
		out[i] = c
	}
	return out
}

// Rank returns this rank.
func (c *Comm) Rank() int { return c.rank }

// Size returns the number of ranks of the world.
func (c *Comm) Size() int { return c.w.n }

// Memory returns buffer.Host.
func (c *Comm) Memory() buffer.MemoryKind { return buffer.Host }

// Start enqueues ops as one group; see collective.Communicator.
func (c *Comm) Start(ops ...collective.Op) collective.Work {
	name := groupName(ops)
	for _, op := range ops {
		if err := op.Validate(c.w.n, buffer.Host); err != nil {
			return collective.DoneWork{Err: err}
		}
		for _, b := range []buffer.Buffer{op.Dst, op.Src} {
			if _, ok := b.(buffer.HostBuffer); b != nil && !ok {
				return collective.DoneWork{Err: fmt.Errorf("inproc: %s: buffer of type %T, want buffer.HostBuffer: %w", op.Kind, b, collective.ErrMemoryKind)}
			}
		}
	}
	w := c.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if c.closed {
		return collective.DoneWork{Err: &collective.RankError{Rank: c.rank, Op: name, Err: collective.ErrClosed}}
	}
	if w.abort != nil {
		return collective.DoneWork{Err: w.abort.errFor(c.rank, name)}
	}
	seq := c.seq
	c.seq++
	rd := w.rounds[seq]
	if rd == nil {
		rd = &round{ops: make([][]collective.Op, w.n), done: make(chan struct{})}
		w.rounds[seq] = rd
	}
	rd.ops[c.rank] = ops
	rd.arrived++
	if rd.arrived == w.n {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
	return &work{c: c, rd: rd, name: name}
}

// Close ends this rank and the world; see the package documentation.
func (c *Comm) Close() error {
	w := c.w
	w.mu.Lock()
	c.closed = true
	w.mu.Unlock()
	w.doAbort(&abortInfo{rank: c.rank, closed: true})
	<-w.exited
	return nil
}

func groupName(ops []collective.Op) string {
	switch len(ops) {
	case 0:
		return "empty group"
	case 1:
		return ops[0].Kind.String()
	}
	return fmt.Sprintf("group of %d ops", len(ops))
}

// work is a started group of one rank.
type work struct {
	c    *Comm
	rd   *round
	name string

	mu   sync.Mutex
	done bool
	err  error
}

// Wait blocks until the group completes, fails, or ctx ends; see
// collective.Work.
func (wk *work) Wait(ctx context.Context) error {
	wk.mu.Lock()
	if wk.done {
		defer wk.mu.Unlock()
		return wk.err
	}
	wk.mu.Unlock()

	var err error
	select {
	case <-wk.rd.done:
		err = wk.result()
	default:
		select {
		case <-wk.rd.done:
			err = wk.result()
		case <-ctx.Done():
			cause := ctx.Err()
			wk.c.w.doAbort(&abortInfo{rank: wk.c.rank, cause: cause})
			<-wk.rd.done // prompt: the abort ends the round
			err = fmt.Errorf("inproc: %s on rank %d: %w (%w)", wk.name, wk.c.rank, cause, wk.c.w.abortErr(wk.c.rank, wk.name))
		}
	}

	wk.mu.Lock()
	defer wk.mu.Unlock()
	if !wk.done {
		wk.done, wk.err = true, err
	}
	return wk.err
}

// result is this rank's outcome of a finished round.
func (wk *work) result() error {
	rd := wk.rd
	if rd.aborted {
		w := wk.c.w
		w.mu.Lock()
		defer w.mu.Unlock()
		if wk.c.closed {
			return &collective.RankError{Rank: wk.c.rank, Op: wk.name, Err: collective.ErrClosed}
		}
		return w.abort.errFor(wk.c.rank, wk.name)
	}
	return rd.err
}

// abortInfo says who ended a world, and why.
type abortInfo struct {
	rank   int
	closed bool  // rank closed its communicator
	cause  error // the context error of the rank's Wait
}

// errFor is the error rank r sees for op name in a world ended by a.
func (a *abortInfo) errFor(r int, name string) error {
	if a.closed && a.rank != r {
		return &collective.RankError{Rank: a.rank, Op: name, Err: collective.ErrPeerLost}
	}
	return &collective.RankError{Rank: a.rank, Op: name, Err: collective.ErrAborted}
}

// abortErr returns a.errFor under the world lock.
func (w *world) abortErr(r int, name string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.abort.errFor(r, name)
}

var errMismatch = fmt.Errorf("inproc: ranks started different groups: %w", collective.ErrInvalid)
