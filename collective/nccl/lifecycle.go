package nccl

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/internal/nccl"
)

// Bounds of the shutdown steps.
const (
	publishTimeout  = 2 * time.Second  // a failure report to the store
	finalizeTimeout = time.Second      // ncclCommFinalize before falling back on abort
	drainTimeout    = 10 * time.Second // the communication stream after abort
)

// fail records f as the communicator's failure unless one came first, and
// then aborts the NCCL communicator: at once for a local failure, after
// peerGrace (or once every running group is complete) for a failure of a
// peer. With publish, the other ranks learn of f through the store.
func (c *Comm) fail(f *failure, publish bool) {
	c.mu.Lock()
	if c.failure != nil {
		c.mu.Unlock()
		return
	}
	c.failure = f
	close(c.failedc)
	c.mu.Unlock()
	if publish {
		c.publish(f)
	}
	if !f.local {
		c.await(peerGrace)
	}
	c.abortNCCL()
}

// publish writes the report of f to the store, where every rank's watch
// finds it.
func (c *Comm) publish(f *failure) {
	ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
	defer cancel()
	_ = c.cfg.Store.Set(ctx, c.prefix+"fail", f.encode())
}

// await returns once every group handed to NCCL is complete, or after d.
func (c *Comm) await(d time.Duration) {
	deadline := time.Now().Add(d)
	for {
		pending := false
		c.do(func() error {
			if c.nc == nil {
				return nil
			}
			for _, w := range c.liveWorks() {
				if !w.recorded || w.completed {
					continue
				}
				if done, err := w.done.Query(); err == nil && done {
					w.completed = true
				} else {
					pending = true
				}
			}
			return nil
		})
		if !pending || time.Now().After(deadline) {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// abortNCCL aborts the NCCL communicator unless that was done: groups seen
// complete just before keep their success; the kernels of the others are
// stopped.
func (c *Comm) abortNCCL() {
	c.do(func() error {
		if c.nc == nil {
			return nil
		}
		for _, w := range c.liveWorks() {
			if w.recorded && !w.completed {
				if done, err := w.done.Query(); err == nil && done {
					w.completed = true
				}
			}
		}
		err := c.nc.Abort()
		c.nc = nil
		return err
	})
}

// Close releases the communicator; see collective.Communicator. A healthy
// communicator first tells the other ranks (whose later groups then fail
// with a *collective.RankError naming this rank and matching
// collective.ErrPeerLost), then finalizes and destroys the NCCL
// communicator when no group is running, or aborts it otherwise. Groups not
// complete fail with collective.ErrClosed. Close returns after the
// communicator's goroutines have exited and its stream, events, kernels and
// memory are released; a second Close returns nil.
//
// Ranks that finish a job together should pass a barrier before closing,
// so that no rank closes while a peer's last group still reads from it.
func (c *Comm) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	healthy := c.failure == nil
	if healthy {
		c.failure = newFailure(failClosed, c.rank, "", true)
		close(c.failedc)
	}
	queued := c.queue
	c.queue = nil
	c.mu.Unlock()
	if healthy {
		c.publish(c.failure)
	}
	close(c.stopc)
	c.cancel()
	c.wg.Wait()
	closed := &collective.RankError{Rank: c.rank, Op: "close", Err: collective.ErrClosed}
	for _, w := range queued {
		w.settle(closed)
	}
	errs := []error{c.do(c.destroyNCCL)}
	if err := c.drain(); err != nil {
		errs = append(errs, err) // memory the GPU may still use is not freed
	} else {
		errs = append(errs, c.tearDown())
	}
	if c.release != nil {
		errs = append(errs, c.release())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("collective/nccl: close: %w", err)
	}
	return nil
}

// destroyNCCL ends the NCCL communicator on the lane: finalize
// and destroy when idle, abort when a group still runs or finalizing does
// not end within finalizeTimeout.
func (c *Comm) destroyNCCL() error {
	nc := c.nc
	if nc == nil {
		return nil
	}
	c.nc = nil
	for _, w := range c.liveWorks() {
		if w.recorded && !w.completed {
			if done, err := w.done.Query(); err != nil || !done {
				return nc.Abort()
			}
			w.completed = true
		}
	}
	err := nc.Finalize()
	for deadline := time.Now().Add(finalizeTimeout); errors.Is(err, nccl.ErrInProgress) && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
		err = nc.AsyncError()
	}
	if err != nil {
		return nc.Abort()
	}
	return nc.Destroy()
}

// drain waits until the communication stream is idle.
func (c *Comm) drain() error {
	if c.stream == nil {
		return nil
	}
	deadline := time.Now().Add(drainTimeout)
	for {
		done, err := c.stream.Query()
		if err != nil || done {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the communication stream is still busy after %v", drainTimeout)
		}
		time.Sleep(time.Millisecond)
	}
}

// tearDown releases the device resources of the communicator (all nil-safe:
// New calls it after a partial set-up).
func (c *Comm) tearDown() error {
	var errs []error
	for _, e := range c.events {
		errs = append(errs, e.Destroy())
	}
	c.events, c.pool = nil, nil
	for _, p := range append(c.retired, c.scratch, c.barrier) {
		if p != 0 {
			errs = append(errs, c.dev.Free(p))
		}
	}
	c.retired, c.scratch, c.scratchLen, c.barrier = nil, 0, 0, 0
	if c.kern != nil {
		errs = append(errs, c.kern.unload())
		c.kern = nil
	}
	if c.stream != nil {
		errs = append(errs, c.stream.Destroy())
		c.stream = nil
	}
	if c.lane != nil {
		errs = append(errs, c.lane.Close())
		c.lane = nil
	}
	return errors.Join(errs...)
}
