package nccl

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/distopt/distopt/collective"
	pcuda "github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/cudalink"
	"github.com/distopt/distopt/internal/nccl"
)

// Work is a group started by Comm.Start.
type Work struct {
	c    *Comm
	name string
	plan plan
	err  error  // the error of a group that failed in Start (issued is nil)
	seq  uint64 // position in the issue order (enqueue), from 1; 0 for a group that failed in Start

	computed *cuda.Event // recorded on Config.Compute at Start
	done     *cuda.Event // recorded on the stream after the group

	issued   chan struct{} // closed by settle
	issueErr error         // written by settle before it closes issued
	settled  sync.Once

	// Touched only on the communicator's lane.
	recorded  bool // done has been recorded on the stream
	completed bool // done was seen complete before any abort

	waitMu   sync.Mutex
	finished bool
	result   error

	trace trace
}

// settle marks w as handed to NCCL (err nil) or failed before that.
func (w *Work) settle(err error) {
	w.settled.Do(func() {
		w.issueErr = err
		close(w.issued)
	})
}

// Wait blocks until the group completes on the GPU, fails, or ctx ends; see
// collective.Work. It polls the group's completion event and NCCL's
// asynchronous error. When ctx ends first, or NCCL reports an error, the
// communicator is aborted (ncclCommAbort, which stops kernels waiting for
// peers) before Wait returns, so that the buffers are free again; the error
// is a *collective.RankError matching collective.ErrAborted (and ctx.Err()).
// When a peer fails, groups not complete by then fail with a
// *collective.RankError naming it. Wait may be called again and returns the
// same result.
func (w *Work) Wait(ctx context.Context) error {
	if w.issued == nil {
		return w.err
	}
	w.waitMu.Lock()
	defer w.waitMu.Unlock()
	if w.finished {
		return w.result
	}
	w.trace.waitCalled = time.Now()
	w.result = w.wait(ctx)
	w.trace.returned = time.Now()
	w.finished = true
	w.c.finish(w, w.result == nil)
	return w.result
}

// StreamWait makes the work queued on s after this call wait for the
// group's completion on the GPU, without blocking the host beyond the
// moment the group is handed to NCCL. It returns the group's error if it
// failed before that.
func (w *Work) StreamWait(s *pcuda.Stream) error {
	if w.issued == nil {
		return w.err
	}
	<-w.issued
	if w.issueErr != nil {
		return w.issueErr
	}
	return cudalink.Stream(s).Wait(w.done)
}

// Precedes reports whether w is a group of the same communicator as o,
// handed to NCCL before o and without error, or one with nothing to do. The
// communication stream runs groups in the order they are handed over, so a
// stream that waits for o's completion (StreamWait) also waits for w's: a
// caller ordering work after several groups needs one wait, for the
// newest. It is false whenever o is not a *Work of this communicator, o
// failed before NCCL or has nothing to do, or w failed before NCCL.
func (w *Work) Precedes(o collective.Work) bool {
	ow, ok := o.(*Work)
	if !ok || ow.c != w.c || ow.issued == nil {
		return false
	}
	if w.issued == nil { // failed in Start, or nothing to do (then nothing to wait for)
		return w.err == nil
	}
	select {
	case <-ow.issued: // the issuer settled every group enqueued before o
	default:
		return false
	}
	return w.seq != 0 && w.seq < ow.seq && ow.issueErr == nil && w.issueErr == nil
}

// pollState is what one look at a group found.
type pollState int

const (
	pollRunning pollState = iota
	pollDone
	pollGone   // the NCCL communicator was aborted or destroyed first
	pollFailed // NCCL or CUDA reported an error
)

func (w *Work) wait(ctx context.Context) error {
	c := w.c
	select {
	case <-w.issued:
	case <-ctx.Done():
		return c.giveUp(w, ctx)
	}
	if w.issueErr != nil {
		return w.issueErr
	}
	if c.completedBy(w) { // a later group was seen complete: no look needed
		w.trace.completed = time.Now()
		return nil
	}
	p := newPoller()
	defer p.release()
	for {
		st, err := c.poll(w)
		w.trace.waitPolls++
		switch st {
		case pollDone:
			w.trace.completed = time.Now()
			return nil
		case pollGone:
			return c.failureNow().errFor(c.rank, w.name)
		case pollFailed:
			return c.failNCCL(ctx, err).errFor(c.rank, w.name)
		}
		if !p.pause(ctx.Done()) {
			return c.giveUp(w, ctx)
		}
	}
}

// completedBy reports whether a group issued after w, or w itself, has
// been seen complete: the communication stream runs groups in issue order,
// so w has completed too.
func (c *Comm) completedBy(w *Work) bool {
	return w.seq != 0 && w.seq <= c.completedSeq.Load()
}

// noteCompleted records that every group up to seq has completed.
func (c *Comm) noteCompleted(seq uint64) {
	for {
		old := c.completedSeq.Load()
		if seq <= old || c.completedSeq.CompareAndSwap(old, seq) {
			return
		}
	}
}

// poll looks once at w's completion and at the communicator's state. It
// looks at the tail event first (the newest group issued): when that group
// has completed, so have w and every other group before it, and their
// Waits need no look of their own (settling many works costs one hand-over
// to the lane).
func (c *Comm) poll(w *Work) (pollState, error) {
	st := pollRunning
	var failed error
	err := c.do(func() error {
		if !w.completed && c.nc != nil && w.seq != 0 && c.tailSeq > w.seq && !c.completedBy(w) {
			done, err := c.tail.Query()
			if err != nil {
				return err
			}
			if done {
				c.noteCompleted(c.tailSeq)
			}
		}
		switch {
		case w.completed:
			st = pollDone
		case c.completedBy(w):
			w.completed, st = true, pollDone
		case c.nc == nil:
			st = pollGone
		default:
			done, err := w.done.Query()
			if err != nil {
				return err
			}
			if done {
				w.completed, st = true, pollDone
				c.noteCompleted(w.seq)
			} else if e := c.nc.AsyncError(); e != nil && !errors.Is(e, nccl.ErrInProgress) {
				st, failed = pollFailed, e
			}
		}
		return nil
	})
	if err != nil {
		return pollFailed, err
	}
	return st, failed
}

// failNCCL makes err, an error NCCL or CUDA reported to this rank, the
// communicator's failure unless one came first, and returns the failure.
// An ncclRemoteError (a peer process exited or the network failed; NCCL
// does not say which peer) is first given lostPeerWait to be explained by
// the heartbeats, which name the rank that is gone: reporting it as this
// rank's own at once would stop this rank's watcher, and tell every rank
// that this one aborted. Every path that meets an NCCL error goes through
// here (the issuer's and the waiters'; after an asynchronous error NCCL
// returns it from every later call too).
func (c *Comm) failNCCL(ctx context.Context, err error) *failure {
	if errors.Is(err, nccl.ErrRemote) {
		if f := c.awaitLostPeer(ctx); f != nil {
			return f
		}
	}
	f := newFailure(failAborted, c.rank, err.Error(), true)
	f.cause = fmt.Errorf("%w: %w", collective.ErrAborted, err)
	c.fail(f, true)
	return c.failureNow()
}

// lostPeerWait bounds the wait for the heartbeats' verdict after an
// ncclRemoteError: the watcher may see the lost peer's last beat one
// heartbeat late, decides once per heartbeat once PeerTimeout has passed,
// may spend a store call's timeout (at least 500 ms) on a tick, and the
// other ranks learn its verdict through the store.
func (c *Comm) lostPeerWait() time.Duration {
	return c.cfg.PeerTimeout + 3*c.cfg.Heartbeat + max(c.cfg.Heartbeat, 500*time.Millisecond) + publishTimeout
}

// awaitLostPeer waits up to lostPeerWait, or until ctx ends, for the
// communicator's first failure (the watcher's, naming the lost rank, or
// any other) and returns it, or nil if none came. A one-rank communicator,
// or one without heartbeats, has nobody to wait for.
func (c *Comm) awaitLostPeer(ctx context.Context) *failure {
	if c.size < 2 || c.cfg.Heartbeat < 0 {
		return c.failureNow()
	}
	t := time.NewTimer(c.lostPeerWait())
	defer t.Stop()
	select {
	case <-c.failedc:
	case <-t.C:
	case <-ctx.Done():
	}
	return c.failureNow()
}

// giveUp aborts the communicator because ctx ended while waiting for w.
func (c *Comm) giveUp(w *Work, ctx context.Context) error {
	f := newFailure(failAborted, c.rank, fmt.Sprintf("stopped waiting for %s: %v", w.name, ctx.Err()), true)
	f.cause = fmt.Errorf("%w: rank %d stopped waiting for %s: %w", collective.ErrAborted, c.rank, w.name, ctx.Err())
	c.fail(f, true)
	c.abortNCCL() // also when another failure came first and is in its grace
	return &collective.RankError{Rank: c.rank, Op: w.name, Err: fmt.Errorf("%w: %w", collective.ErrAborted, ctx.Err())}
}

// finish forgets a waited-for group and recycles its done event when it
// completed.
func (c *Comm) finish(w *Work, ok bool) {
	c.mu.Lock()
	delete(c.live, w)
	c.mu.Unlock()
	if ok {
		c.recycle(w.done)
	}
}
