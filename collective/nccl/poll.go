package nccl

import (
	"runtime"
	"time"
)

// Pacing of the looks of a wait: Work.Wait looking at a group's completion
// event, and the issuer looking at NCCL's launch of a group in the
// background.
//
// Go's timers cannot pause a goroutine for much less than a millisecond
// once the process has nothing else to run: the idle runtime then sleeps
// in epoll_wait, whose timeout counts whole milliseconds, and a shorter
// delay is rounded up to one (runtime/netpoll_epoll.go). A 10 µs time.Sleep
// takes about 0.8 ms on an idle host. A collective of a step completes in
// microseconds to milliseconds and every late look adds directly to the
// step (a barrier cost 1.4 ms when the looks were paced by 10 to 40 µs
// timers), so during the first pollSpinFor of a wait the poller yields the
// processor (runtime.Gosched) between looks instead of sleeping, much as
// CUDA's own synchronization spins by default. Each look is a hop to the
// communicator's lane, a few microseconds, which paces the loop. Past
// pollSpinFor the wait is long anyway: the poller sleeps pollSleep between
// looks and leaves the processor alone.
const (
	pollSpinFor = 20 * time.Millisecond
	pollSleep   = time.Millisecond
)

// poller paces the looks of one wait.
type poller struct {
	start time.Time
	timer *time.Timer // created when the wait first sleeps
}

// newPoller starts the pacing of a wait that begins now.
func newPoller() *poller { return &poller{start: time.Now()} }

// pause returns true when it is time for the next look, or false as soon
// as stop is closed (a nil stop is never closed).
func (p *poller) pause(stop <-chan struct{}) bool {
	if time.Since(p.start) < pollSpinFor {
		select {
		case <-stop:
			return false
		default:
		}
		runtime.Gosched()
		return true
	}
	if p.timer == nil {
		p.timer = time.NewTimer(pollSleep)
	} else {
		p.timer.Reset(pollSleep)
	}
	select {
	case <-stop:
		return false
	case <-p.timer.C:
		return true
	}
}

// release stops the poller's timer.
func (p *poller) release() {
	if p.timer != nil {
		p.timer.Stop()
	}
}
