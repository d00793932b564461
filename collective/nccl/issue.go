package nccl

import (
	"context"
	"errors"
	"time"

	"github.com/distopt/distopt/internal/nccl"
)

// errGone means the NCCL communicator has been aborted or destroyed.
var errGone = errors.New("collective/nccl: NCCL communicator gone")

// issuer hands the started groups to NCCL, one after the other, in the
// order of Start. NCCL's non-blocking mode wants each group's launch to be
// finished (ncclCommGetAsyncError no longer ncclInProgress) before the next
// call; doing this here keeps Start from ever waiting for the other ranks.
func (c *Comm) issuer() {
	defer c.wg.Done()
	for {
		w := c.next()
		if w == nil {
			return
		}
		c.issue(w)
	}
}

// next returns the oldest group not yet issued, waiting for one; nil once
// Close has begun.
func (c *Comm) next() *Work {
	for {
		c.mu.Lock()
		if len(c.queue) > 0 {
			w := c.queue[0]
			c.queue = c.queue[1:]
			c.mu.Unlock()
			return w
		}
		c.mu.Unlock()
		select {
		case <-c.kick:
		case <-c.stopc:
			return nil
		}
	}
}

// issue runs w's plan on the communication stream: wait for the compute
// stream, pre kernels, the NCCL group, post kernels, and the done event.
// Usually all in one hop to the communicator's lane: a non-blocking group's
// launch is awaited there for up to Config.LaunchSpin, and only a slower launch
// is polled from the issuer (awaitLaunch).
func (c *Comm) issue(w *Work) {
	w.trace.picked = time.Now()
	if f := c.failureNow(); f != nil {
		w.settle(f.errFor(c.rank, w.name))
		return
	}
	finished := false // the done event is recorded
	err := c.do(func() error {
		if c.nc == nil {
			return errGone
		}
		if w.computed != nil {
			if err := c.stream.Wait(w.computed); err != nil {
				return err
			}
		}
		base, err := c.ensureScratch(w.plan.scratch)
		if err != nil {
			return err
		}
		for _, l := range w.plan.pre {
			if err := c.kern.launch(c.stream, l, base); err != nil {
				return err
			}
		}
		if len(w.plan.calls) > 0 {
			if err := c.lib.GroupStart(); err != nil {
				return err
			}
			var callErr error
			for _, cl := range w.plan.calls {
				if callErr = c.call(cl, base); callErr != nil {
					break
				}
			}
			err = c.lib.GroupEnd()
			if callErr != nil || err != nil && !errors.Is(err, nccl.ErrInProgress) {
				return errors.Join(callErr, err)
			}
			w.trace.enqueued = time.Now()
			if err != nil { // in progress
				w.trace.launchPolls, err = c.spinLaunch()
				if errors.Is(err, nccl.ErrInProgress) {
					return nil // awaitLaunch goes on
				}
				if err != nil {
					return err
				}
			}
		} else {
			w.trace.enqueued = time.Now()
		}
		finished = true
		return c.finishIssue(w)
	})
	c.recycle(w.computed)
	w.computed = nil
	if err == nil && !finished {
		var polls int
		polls, err = c.awaitLaunch(w)
		w.trace.launchPolls += polls
	}
	if err != nil {
		if f := c.failureNow(); f != nil {
			w.settle(f.errFor(c.rank, w.name))
			return
		}
		w.settle(c.failNCCL(context.Background(), err).errFor(c.rank, w.name))
		return
	}
	w.trace.issued = time.Now()
	w.settle(nil)
}

// finishIssue queues w's post kernels and records its done event, once its
// NCCL group is on the stream. It runs on the lane.
func (c *Comm) finishIssue(w *Work) error {
	w.trace.launched = time.Now()
	base := uintptr(c.scratch)
	for _, l := range w.plan.post {
		if err := c.kern.launch(c.stream, l, base); err != nil {
			return err
		}
	}
	if err := w.done.Record(c.stream); err != nil {
		return err
	}
	w.recorded = true
	// A group queued while the stream is captured into a CUDA graph runs
	// at each launch of the graph, not now: its done event lives inside the
	// graph and cannot be queried. The host has nothing to wait for: the
	// graph's launches are ordered on the stream they are launched on.
	captured, err := c.stream.Capturing()
	if err != nil {
		return err
	}
	w.completed = captured
	if !captured { // the tail tells a waiter about every group up to this one (poll)
		if err := c.tail.Record(c.stream); err != nil {
			return err
		}
		c.tailSeq = w.seq
	}
	return nil
}

// spinLaunch polls ncclCommGetAsyncError until it no longer reports
// ncclInProgress or Config.LaunchSpin has passed (one look when it is
// negative); it returns the number of looks and the last state. It runs on
// the lane.
func (c *Comm) spinLaunch() (int, error) {
	deadline := time.Now().Add(c.cfg.LaunchSpin)
	for n := 1; ; n++ {
		state := c.nc.AsyncError()
		if !errors.Is(state, nccl.ErrInProgress) || time.Now().After(deadline) {
			return n, state
		}
	}
}

// call issues one NCCL collective; base is the scratch area.
func (c *Comm) call(cl call, base uintptr) error {
	send, recv, s := cl.send.resolve(base), cl.recv.resolve(base), c.stream.Handle()
	switch cl.kind {
	case collAllGather:
		return c.nc.AllGather(send, recv, cl.count, cl.dt, s)
	case collReduceScatter:
		return c.nc.ReduceScatter(send, recv, cl.count, cl.dt, cl.op, s)
	case collAllReduce:
		return c.nc.AllReduce(send, recv, cl.count, cl.dt, cl.op, s)
	case collSend:
		return c.nc.Send(send, cl.count, cl.dt, cl.root, s)
	case collRecv:
		return c.nc.Recv(recv, cl.count, cl.dt, cl.root, s)
	default:
		return c.nc.Broadcast(send, recv, cl.count, cl.dt, cl.root, s)
	}
}

// ensureScratch returns a scratch area of at least n bytes. A smaller area
// is retired, not freed, since groups still queued on the stream may use
// it; Close frees them all. It runs on the lane.
func (c *Comm) ensureScratch(n int) (uintptr, error) {
	if n <= c.scratchLen {
		return uintptr(c.scratch), nil
	}
	size := max(n, c.scratchLen+c.scratchLen/2)
	p, err := c.dev.Alloc(size)
	if err != nil {
		return 0, err
	}
	if c.scratchLen > 0 {
		c.retired = append(c.retired, c.scratch)
	}
	c.scratch, c.scratchLen = p, size
	return uintptr(p), nil
}

// awaitLaunch polls the communicator, paced by a poller, until NCCL has
// finished launching w's group in the background, then finishes issuing w
// (finishIssue) in the same hop to the lane. It returns the
// number of looks; it gives up when the communicator is aborted or Close
// begins.
func (c *Comm) awaitLaunch(w *Work) (int, error) {
	p := newPoller()
	defer p.release()
	for n := 1; ; n++ {
		launching := false
		err := c.do(func() error {
			if c.nc == nil {
				return errGone
			}
			state := c.nc.AsyncError()
			if errors.Is(state, nccl.ErrInProgress) {
				launching = true
				return nil
			}
			if state != nil {
				return state
			}
			return c.finishIssue(w)
		})
		if err != nil || !launching {
			return n, err
		}
		if !p.pause(c.stopc) {
			return n, errStopped
		}
	}
}

// liveWorks returns the groups started and not yet finished by Wait.
func (c *Comm) liveWorks() []*Work {
	c.mu.Lock()
	defer c.mu.Unlock()
	ws := make([]*Work, 0, len(c.live))
	for w := range c.live {
		ws = append(ws, w)
	}
	return ws
}
