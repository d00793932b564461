package nccl

import "time"

// Phases tells where the time of one group went between Start and the
// return of Wait, for latency studies (cmd/distopt-ncclbench -latency).
// Every moment is an offset from the Start call, read from the monotonic
// clock; a moment the group never reached is 0.
type Phases struct {
	// Picked: the communicator's issuer took the group from the queue.
	Picked time.Duration
	// Enqueued: ncclGroupEnd returned (the NCCL calls were made).
	Enqueued time.Duration
	// Launched: NCCL had launched the group onto the stream (for a
	// non-blocking ncclGroupEnd, when ncclCommGetAsyncError stopped
	// reporting ncclInProgress), after LaunchPolls looks at it (spinning
	// on the communicator's lane first, then from the issuer).
	Launched    time.Duration
	LaunchPolls int
	// Issued: the completion event was recorded after the group; Wait
	// and StreamWait could go on from here.
	Issued time.Duration
	// WaitCalled: Wait was called.
	WaitCalled time.Duration
	// Completed: Wait saw the completion event complete, after
	// WaitPolls looks.
	Completed time.Duration
	WaitPolls int
	// Returned: Wait returned.
	Returned time.Duration
}

// trace holds the moments of Phases as times.
type trace struct {
	start, picked, enqueued, launched, issued time.Time // written by the issuer
	launchPolls                               int       // written by the issuer
	waitCalled, completed, returned           time.Time // written by Wait
	waitPolls                                 int       // written by Wait
}

// since returns t - start, or 0 for a zero t.
func since(start, t time.Time) time.Duration {
	if t.IsZero() {
		return 0
	}
	return t.Sub(start)
}

// Phases returns where the group's time went (see Phases). Call it after
// Wait has returned; the issuer's moments are reported only once the group
// was handed to NCCL or failed before that, the others once Wait returned.
// A group that failed in Start, or had nothing to do, reports zeros.
func (w *Work) Phases() Phases {
	if w.issued == nil {
		return Phases{}
	}
	var p Phases
	tr := &w.trace
	select {
	case <-w.issued:
		p.Picked, p.Enqueued = since(tr.start, tr.picked), since(tr.start, tr.enqueued)
		p.Launched, p.LaunchPolls = since(tr.start, tr.launched), tr.launchPolls
		p.Issued = since(tr.start, tr.issued)
	default:
	}
	w.waitMu.Lock()
	defer w.waitMu.Unlock()
	if w.finished {
		p.WaitCalled, p.Completed = since(tr.start, tr.waitCalled), since(tr.start, tr.completed)
		p.WaitPolls, p.Returned = tr.waitPolls, since(tr.start, tr.returned)
	}
	return p
}
