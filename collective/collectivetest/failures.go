package collectivetest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
)

// abortCheck: rank n-1 never starts an all-reduce that the others wait for
// under a short deadline (or, with cancel, that rank 0 cancels). Their Wait
// must return promptly with an error matching their ctx.Err() or
// collective.ErrAborted; afterwards every rank's ops, the lagging rank's
// all-reduce included, fail promptly with a *collective.RankError matching
// collective.ErrAborted.
func (e *env) abortCheck(cancel bool) error {
	if e.n < 2 {
		return errors.New("collectivetest: the abort check needs 2 ranks or more")
	}
	buf, err := e.alloc(64)
	if err != nil {
		return err
	}
	op := collective.Op{Kind: collective.OpAllReduce, Dst: buf.view, Src: buf.view, DType: buffer.Float32, Reduce: collective.Sum}
	d := e.o.Deadline
	if e.r != e.n-1 {
		ctx, stop := context.WithTimeout(e.ctx, d)
		if cancel {
			// Rank 0 cancels after d; the others' deadline comes later.
			ctx, stop = context.WithTimeout(e.ctx, 2*d)
			if e.r == 0 {
				var cancelFn context.CancelFunc
				ctx, cancelFn = context.WithCancel(e.ctx)
				t := time.AfterFunc(d, cancelFn)
				stop = func() { t.Stop(); cancelFn() }
			}
		}
		defer stop()
		start := time.Now()
		err := e.c.Start(op).Wait(ctx)
		took := time.Since(start)
		switch {
		case err == nil:
			return errors.New("wait without the lagging rank succeeded")
		case took > 2*d+e.o.Slack:
			return fmt.Errorf("wait returned after %v, deadline %v: %w", took, d, err)
		case cancel && e.r == 0 && !errors.Is(err, context.Canceled):
			return fmt.Errorf("cancelled wait returned %v, want an error matching context.Canceled", err)
		case ctx.Err() != nil && !errors.Is(err, ctx.Err()) && !errors.Is(err, collective.ErrAborted):
			return fmt.Errorf("wait returned %v, want an error matching %v or %v", err, ctx.Err(), collective.ErrAborted)
		case ctx.Err() == nil && !errors.Is(err, collective.ErrAborted):
			return fmt.Errorf("wait returned %v before its deadline, want an error matching %v", err, collective.ErrAborted)
		}
	} else {
		// Start late, once the others have given up.
		e.waitPeers(2*d + e.o.Slack/2)
		if err := e.expectAborted(op); err != nil {
			return fmt.Errorf("lagging rank: %w", err)
		}
	}
	return e.expectAborted(collective.Op{Kind: collective.OpBarrier})
}

// expectAborted checks that op fails promptly with a *RankError matching
// collective.ErrAborted.
func (e *env) expectAborted(op collective.Op) error {
	ctx, stop := context.WithTimeout(e.ctx, e.o.Slack)
	defer stop()
	err := e.c.Start(op).Wait(ctx)
	var re *collective.RankError
	switch {
	case err == nil:
		return fmt.Errorf("%s on an aborted communicator succeeded", op.Kind)
	case ctx.Err() != nil:
		return fmt.Errorf("%s on an aborted communicator did not fail within %v: %w", op.Kind, e.o.Slack, err)
	case !errors.Is(err, collective.ErrAborted):
		return fmt.Errorf("%s on an aborted communicator returned %v, want an error matching %v", op.Kind, err, collective.ErrAborted)
	case !errors.As(err, &re):
		return fmt.Errorf("%s on an aborted communicator returned %v, want a *collective.RankError", op.Kind, err)
	case re.Rank < 0 || re.Rank >= e.n:
		return fmt.Errorf("RankError names rank %d of %d", re.Rank, e.n)
	}
	return nil
}

// closeCheck: rank n-1 closes its communicator while the others wait for
// an all-reduce. Their Wait must return promptly with a *RankError naming
// rank n-1 and matching collective.ErrClosed, ErrPeerLost or ErrAborted;
// the closed rank's later ops fail with collective.ErrClosed, and a second
// Close returns.
func (e *env) closeCheck() error {
	buf, err := e.alloc(64)
	if err != nil {
		return err
	}
	op := collective.Op{Kind: collective.OpAllReduce, Dst: buf.view, Src: buf.view, DType: buffer.Float32, Reduce: collective.Sum}
	d := e.o.Deadline
	closer := e.n - 1
	if e.r == closer {
		time.Sleep(d) // let the others start
		if err := e.closeWithin(); err != nil {
			return err
		}
		err := e.c.Start(op).Wait(e.ctx)
		if !errors.Is(err, collective.ErrClosed) {
			return fmt.Errorf("op after Close returned %v, want an error matching %v", err, collective.ErrClosed)
		}
		return e.closeWithin()
	}
	ctx, stop := context.WithTimeout(e.ctx, d+2*e.o.Slack)
	defer stop()
	start := time.Now()
	err = e.c.Start(op).Wait(ctx)
	took := time.Since(start)
	var re *collective.RankError
	switch {
	case err == nil:
		return errors.New("all-reduce with a closed peer succeeded")
	case took > d+e.o.Slack || ctx.Err() != nil:
		return fmt.Errorf("all-reduce with a closed peer returned after %v: %w", took, err)
	case !errors.Is(err, collective.ErrClosed) && !errors.Is(err, collective.ErrPeerLost) && !errors.Is(err, collective.ErrAborted):
		return fmt.Errorf("all-reduce with a closed peer returned %v, want ErrClosed, ErrPeerLost or ErrAborted", err)
	case !errors.As(err, &re) || re.Rank != closer:
		return fmt.Errorf("all-reduce with a closed peer returned %v, want a *collective.RankError naming rank %d", err, closer)
	}
	// Later ops fail too, promptly.
	ctx2, stop2 := context.WithTimeout(e.ctx, e.o.Slack)
	defer stop2()
	if err := e.c.Start(collective.Op{Kind: collective.OpBarrier}).Wait(ctx2); err == nil || ctx2.Err() != nil {
		return fmt.Errorf("barrier with a closed peer returned %v", err)
	}
	return nil
}

// closeWithin closes the communicator and fails if Close takes longer than
// Slack.
func (e *env) closeWithin() error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.c.Close()
	}()
	select {
	case <-done:
		return nil
	case <-time.After(e.o.Slack):
		return fmt.Errorf("Close did not return within %v", e.o.Slack)
	}
}
