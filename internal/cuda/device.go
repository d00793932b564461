package cuda

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Device is one GPU with its primary context current on a dedicated OS
// thread. Its methods are safe for concurrent use; they all run on that
// thread (see Do).
type Device struct {
	info DeviceInfo
	dev  int     // CUdevice
	ctx  uintptr // the primary context

	thread       // the worker
	lanes  lanes // threads of their own (NewLane)

	res   resources
	syncs atomic.Int64 // host waits for the device (HostSyncs)
	hops  atomic.Int64 // calls handed to the worker (Hops)
	spin  atomic.Int64 // nanoseconds a side of a hop polls before it sleeps (SetHopSpin)
}

// Hops returns how many calls have been handed to the device's worker or
// to one of its lanes since Open (Do from another goroutine: every method
// of the device and its objects is one; Lane.Do): each costs a hand-over
// between threads, whether or not the host waits for the GPU.
func (d *Device) Hops() int64 { return d.hops.Load() }

// SetHopSpin sets how long, in a hand-over to the worker (Do), the caller
// polls for the result and the worker for the next call before each goes to
// sleep; 0 sleeps at once. A sleeping side is woken by the operating
// system, which costs about 20 us a hop (H200 host, measured by
// BenchmarkHop) against about 2 us for a polled one; a polling side keeps a
// core busy for up to s after each call. Open sets the duration in the
// environment variable DISTOPT_HOP_SPIN (time's syntax), else 0: polling
// made the optimizer's step alone faster (BenchmarkStepShards, the step's
// host time 1.9 -> 1.25 ms at 25 buckets) but not the GPT example's
// training steps on the same GPU (124M: 412k tokens/s without, 406k with;
// 1.3B: equal), whose host runs ahead of the GPU.
func (d *Device) SetHopSpin(s time.Duration) { d.spin.Store(int64(max(s, 0))) }

// HostSyncs returns how many times the host has waited for this device's
// work since Open: the Synchronize calls of the device, its streams and
// events, and the synchronous copies (Stream.Upload, Stream.Download).
// Event and stream queries, which do not wait, are not counted.
func (d *Device) HostSyncs() int64 { return d.syncs.Load() }

// Open retains the primary context of GPU ordinal and starts the worker
// that drives it. It returns an error matching ErrNoDriver or ErrNoDevice
// when there is no driver, no GPU, or no GPU of that ordinal. Close releases
// the device.
func Open(ordinal int) (*Device, error) {
	n, err := DeviceCount()
	if err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= n {
		return nil, fmt.Errorf("%w: ordinal %d, the driver sees %d devices", ErrNoDevice, ordinal, n)
	}
	info, err := deviceInfo(ordinal)
	if err != nil {
		return nil, err
	}
	d := &Device{info: info, thread: newThread()}
	d.res.init()
	spin, err := hopSpinFromEnv()
	if err != nil {
		return nil, err
	}
	d.SetHopSpin(spin)
	ready := make(chan error, 1)
	go d.run(ready)
	if err := <-ready; err != nil {
		<-d.done
		return nil, err
	}
	return d, nil
}

// run is the worker: it locks itself to its OS thread, makes the primary
// context current there, and executes submitted functions until Close. It
// never unlocks the thread, so the thread ends with it and no other
// goroutine ever runs with this context current by accident.
func (d *Device) run(ready chan<- error) {
	defer close(d.done)
	runtime.LockOSThread()
	var r Result
	d.dev, r = cuDeviceGet(d.info.Ordinal)
	if err := check("cuDeviceGet", r); err != nil {
		ready <- err
		return
	}
	d.ctx, r = cuDevicePrimaryCtxRetain(d.dev)
	if err := check("cuDevicePrimaryCtxRetain", r); err != nil {
		ready <- err
		return
	}
	if err := check("cuCtxSetCurrent", cuCtxSetCurrent(d.ctx)); err != nil {
		cuDevicePrimaryCtxRelease(d.dev)
		ready <- err
		return
	}
	d.tid.Store(gettid())
	ready <- nil
	d.serve(&d.thread)
	d.tid.Store(0)
	cuCtxSetCurrent(0)
	cuDevicePrimaryCtxRelease(d.dev)
}

// serve executes the functions handed to t until its queue is closed.
func (d *Device) serve(t *thread) {
	for {
		f, ok := poll(t.work, time.Duration(d.spin.Load()))
		if !ok {
			return
		}
		f()
	}
}

// onWorker reports whether the caller is the device's worker goroutine or
// one of its lanes (every one has the context current). A goroutine locked
// to a thread is the only one that runs on it, so the thread id identifies
// the worker.
func (d *Device) onWorker() bool {
	tid := gettid()
	if w := d.tid.Load(); w != 0 && w == tid {
		return true
	}
	return d.lanes.has(tid)
}

// Do runs fn on the device's worker, with the device's primary context
// current, and returns its error. Calls from inside fn (to Do or to any
// method of the device and its objects) run directly. A panic in fn is
// raised again in the caller. Do returns ErrClosed after Close.
func (d *Device) Do(fn func() error) error {
	if d.onWorker() {
		return fn()
	}
	return d.handOver(&d.thread, fn)
}

// handOver runs fn on the thread t and returns its error; see Do.
func (d *Device) handOver(t *thread, fn func() error) error {
	type outcome struct {
		err      error
		panicked bool
		value    any
	}
	done := make(chan outcome, 1)
	job := func() {
		o := outcome{panicked: true}
		defer func() {
			if o.panicked {
				o.value = recover()
			}
			done <- o
		}()
		o.err = fn()
		o.panicked = false
	}
	t.mu.RLock()
	if t.closed {
		t.mu.RUnlock()
		return ErrClosed
	}
	t.work <- job
	t.mu.RUnlock()
	d.hops.Add(1)
	o, _ := poll(done, time.Duration(d.spin.Load()))
	if o.panicked {
		panic(o.value)
	}
	return o.err
}

// hopSpinFromEnv returns the polling of a hand-over Open sets: the
// duration in DISTOPT_HOP_SPIN, else 0.
func hopSpinFromEnv() (time.Duration, error) {
	v := os.Getenv(EnvHopSpin)
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("cuda: %s=%q: want a duration of at least 0 (such as 20us, or 0 for none)", EnvHopSpin, v)
	}
	return d, nil
}

// EnvHopSpin names the environment variable that overrides Open's polling
// of a hand-over (SetHopSpin).
const EnvHopSpin = "DISTOPT_HOP_SPIN"

// hopQueue is the capacity of the worker's queue: a caller hands its call
// over without waiting for the worker to take it.
const hopQueue = 64

// poll receives from c, polling for up to spin before it blocks; ok is
// false once c is closed and drained.
func poll[T any](c <-chan T, spin time.Duration) (v T, ok bool) {
	if spin > 0 {
		deadline := time.Now().Add(spin)
		for {
			select {
			case v, ok = <-c:
				return v, ok
			default:
			}
			if time.Now().After(deadline) {
				break
			}
			runtime.Gosched() // a caller may hold the P the worker needs
		}
	}
	v, ok = <-c
	return v, ok
}

// Close stops the worker and releases the primary context. Memory, streams
// and modules not freed before remain until the driver destroys the primary
// context (when its last user releases it). A second Close returns ErrClosed.
// Close must not be called from inside Do.
func (d *Device) Close() error {
	if d.onWorker() {
		panic("cuda: Device.Close called from inside Device.Do")
	}
	for _, l := range d.lanes.all() {
		l.Close()
	}
	if !d.thread.stop() {
		return ErrClosed
	}
	<-d.done
	return nil
}

// thread is a goroutine locked to an OS thread with the device's context
// current, and its queue of functions to run.
type thread struct {
	tid  atomic.Int64 // OS thread; 0 until it runs and once it has stopped
	work chan func()
	done chan struct{}

	mu     sync.RWMutex // guards closed against sends on work
	closed bool
}

func newThread() thread {
	return thread{work: make(chan func(), hopQueue), done: make(chan struct{})}
}

// stop closes t's queue; false when it was closed before.
func (t *thread) stop() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.closed = true
	close(t.work)
	return true
}

// Info describes the device.
func (d *Device) Info() DeviceInfo { return d.info }

// Ordinal returns the device's ordinal.
func (d *Device) Ordinal() int { return d.info.Ordinal }

// Context returns the raw CUcontext (the primary context), for code that
// hands it to other CUDA libraries.
func (d *Device) Context() uintptr { return d.ctx }

// Synchronize waits until all work queued on the device has finished
// (cuCtxSynchronize) and returns the first asynchronous error, if any.
func (d *Device) Synchronize() error {
	d.syncs.Add(1)
	return d.Do(func() error { return check("cuCtxSynchronize", cuCtxSynchronize()) })
}

// MemInfo returns the free and total device memory in bytes, as the driver
// sees it (other processes' allocations included).
func (d *Device) MemInfo() (free, total uint64, err error) {
	err = d.Do(func() error {
		var r Result
		free, total, r = cuMemGetInfo()
		return check("cuMemGetInfo", r)
	})
	return free, total, err
}

// Usage counts what a Device has handed out and not yet released.
type Usage struct {
	DeviceBytes, DeviceAllocs int // from Alloc
	HostBytes, HostAllocs     int // from AllocHost
	Streams, Events, Modules  int
}

// Usage returns what is allocated and not yet freed through this Device.
func (d *Device) Usage() Usage {
	d.res.mu.Lock()
	defer d.res.mu.Unlock()
	u := d.res.counts
	u.DeviceAllocs = len(d.res.dev)
	u.HostAllocs = len(d.res.host)
	return u
}
