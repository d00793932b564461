package cudatest

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/distopt/distopt/cuda"
)

// EnvRequire is the environment variable that turns skips into failures.
const EnvRequire = "DISTOPT_REQUIRE_GPU"

// Required reports whether the environment demands a GPU
// (DISTOPT_REQUIRE_GPU=1).
func Required() bool { return os.Getenv(EnvRequire) == "1" }

// Unavailable handles err, the error of an attempt to reach a GPU (or a GPU
// library such as NCCL): nil returns; an error matching cuda.ErrNoDriver or
// cuda.ErrNoDevice, or any error at all when extraKinds matches it, skips
// the test, or fails it when Required; any other error fails the test.
func Unavailable(tb testing.TB, err error, extraKinds ...error) {
	tb.Helper()
	if err == nil {
		return
	}
	missing := errors.Is(err, cuda.ErrNoDriver) || errors.Is(err, cuda.ErrNoDevice)
	for _, k := range extraKinds {
		missing = missing || errors.Is(err, k)
	}
	switch {
	case !missing:
		tb.Fatalf("GPU setup failed: %v", err)
	case Required():
		tb.Fatalf("GPU required (%s=1) but unavailable: %v", EnvRequire, err)
	default:
		tb.Skipf("no GPU: %v", err)
	}
}

// Require opens GPU 0 for the test, or skips/fails it as Unavailable says.
// When the test ends it checks that everything allocated through the
// returned Device was released (failing the test on a leak) and closes it.
func Require(tb testing.TB) *cuda.Device {
	tb.Helper()
	return RequireDevices(tb, 1)[0]
}

// RequireDevices opens GPUs 0..n-1 for the test, as Require does for one. A
// host with fewer than n GPUs counts as having none.
func RequireDevices(tb testing.TB, n int) []*cuda.Device {
	tb.Helper()
	count, err := cuda.DeviceCount()
	Unavailable(tb, err)
	if count < n {
		Unavailable(tb, errors.Join(cuda.ErrNoDevice, errors.New("the test needs more devices than there are")))
	}
	devs := make([]*cuda.Device, n)
	for i := range devs {
		d, err := cuda.Open(i)
		Unavailable(tb, err)
		devs[i] = d
		tb.Cleanup(func() {
			if u := d.Usage(); u != (cuda.Usage{}) {
				tb.Errorf("device %d: leaked at the end of the test: %+v", i, u)
			}
			if err := d.Close(); err != nil {
				tb.Errorf("device %d: Close: %v", i, err)
			}
		})
	}
	return devs
}

// The helpers below make a resource of d for the test, fail the test when
// that fails, and release the resource when the test ends (before Require's
// leak check runs).

// Stream returns a new stream of d.
func Stream(tb testing.TB, d *cuda.Device) *cuda.Stream {
	tb.Helper()
	s, err := d.NewStream()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Destroy() })
	return s
}

// Event returns a new event of d (with timing when timing is true).
func Event(tb testing.TB, d *cuda.Device, timing bool) *cuda.Event {
	tb.Helper()
	e, err := d.NewEvent(timing)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { e.Destroy() })
	return e
}

// Alloc returns n bytes of device memory of d.
func Alloc(tb testing.TB, d *cuda.Device, n int) cuda.DevicePtr {
	tb.Helper()
	p, err := d.Alloc(n)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { d.Free(p) })
	return p
}

// AllocHost returns n bytes of pinned host memory of d.
func AllocHost(tb testing.TB, d *cuda.Device, n int) *cuda.HostBuffer {
	tb.Helper()
	h, err := d.AllocHost(n)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { h.Free() })
	return h
}

// GPUTime runs queue once to warm up, then times b.N more calls by CUDA
// events recorded on s around them, and returns the GPU's time per call.
// The calls are queued from d's worker goroutine (cuda.Device.Do): a
// launch from another goroutine costs a hand-off to it (about 20 us on an
// H200's host, more than many kernels take), which would leave the GPU
// idle between kernels. It resets b's timer after the warm-up.
func GPUTime(b *testing.B, d *cuda.Device, s *cuda.Stream, queue func() error) time.Duration {
	b.Helper()
	start, end := Event(b, d, true), Event(b, d, true)
	check := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	check(queue())
	check(s.Synchronize())
	b.ResetTimer()
	check(d.Do(func() error {
		if err := start.Record(s); err != nil {
			return err
		}
		for range b.N {
			if err := queue(); err != nil {
				return err
			}
		}
		return end.Record(s)
	}))
	check(end.Synchronize())
	el, err := cuda.Elapsed(start, end)
	check(err)
	return el / time.Duration(b.N)
}
