package cuda

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Lane is a second thread that drives a device: a goroutine locked to an
// OS thread of its own with the device's primary context current, like the
// device's worker, running the functions given to its Do one at a time.
// Calls made from inside a lane's Do (to any method of the device and its
// objects) run directly on the lane.
//
// A lane is for work that must not queue behind the worker: a
// communicator (collective/nccl) hands its groups to NCCL and looks at
// them from a lane of its own, so that a caller may start groups and wait
// for them from inside Device.Do (a whole step enqueued in one hand-over).
// Were the issuer to need the worker, a worker waiting for a group would
// never let it be issued: a deadlock.
type Lane struct {
	d *Device
	thread
}

// lanes is the set of a device's running lanes, by the OS thread each
// runs on; a lane enters it when its thread starts and leaves it when the
// thread ends.
type lanes struct {
	n   atomic.Int32 // how many: onWorker's fast path when there is none
	tid sync.Map     // OS thread id (int64) -> *Lane
}

// has reports whether tid is the thread of one of the lanes.
func (ls *lanes) has(tid int64) bool {
	if ls.n.Load() == 0 {
		return false
	}
	_, ok := ls.tid.Load(tid)
	return ok
}

// add and remove enter and leave l, running on thread tid.
func (ls *lanes) add(tid int64, l *Lane) { ls.tid.Store(tid, l); ls.n.Add(1) }
func (ls *lanes) remove(tid int64)       { ls.tid.Delete(tid); ls.n.Add(-1) }

// all returns the running lanes.
func (ls *lanes) all() []*Lane {
	var out []*Lane
	ls.tid.Range(func(_, l any) bool { out = append(out, l.(*Lane)); return true })
	return out
}

// NewLane starts a lane of the device. Close it before the device (Device.Close
// closes the lanes left open).
func (d *Device) NewLane() (*Lane, error) {
	l := &Lane{d: d, thread: newThread()}
	ready := make(chan error, 1)
	go l.run(ready)
	if err := <-ready; err != nil {
		<-l.done
		return nil, err
	}
	return l, nil
}

// run is the lane's goroutine: locked to its thread (never unlocked, so
// that the thread ends with it), the device's context current.
func (l *Lane) run(ready chan<- error) {
	defer close(l.done)
	runtime.LockOSThread()
	l.d.thread.mu.RLock() // the device is open (no hop: NewLane may run inside Do)
	closed := l.d.thread.closed
	l.d.thread.mu.RUnlock()
	if closed {
		ready <- ErrClosed
		return
	}
	if err := check("cuCtxSetCurrent", cuCtxSetCurrent(l.d.ctx)); err != nil {
		ready <- err
		return
	}
	tid := gettid()
	l.tid.Store(tid)
	l.d.lanes.add(tid, l)
	ready <- nil
	l.d.serve(&l.thread)
	l.d.lanes.remove(tid)
	l.tid.Store(0)
	cuCtxSetCurrent(0)
}

// Do runs fn on the lane and returns its error, as Device.Do does on the
// worker: directly when called from the lane itself, else handed over
// (from the worker too: what a lane's owner keeps on the lane is touched
// by one thread). Do returns ErrClosed after Close.
func (l *Lane) Do(fn func() error) error {
	if l.tid.Load() == gettid() {
		return fn()
	}
	return l.d.handOver(&l.thread, fn)
}

// Close stops the lane after the functions already given to it. A second
// Close returns ErrClosed. Close must not be called from inside the lane's
// Do.
func (l *Lane) Close() error {
	if l.tid.Load() == gettid() {
		panic("cuda: Lane.Close called from inside Lane.Do")
	}
	if !l.thread.stop() {
		return ErrClosed
	}
	<-l.done
	return nil
}
