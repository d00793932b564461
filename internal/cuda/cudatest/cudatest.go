// Package cudatest gives the GPU tests of distopt's internal packages the
// helpers of the public cuda/cudatest (the one rule by which a GPU test
// runs, skips or fails, the leak check, resources released at the end of a
// test) on the handles of internal/cuda.
package cudatest

import (
	"testing"
	"time"

	pcudatest "github.com/distopt/distopt/cuda/cudatest"
	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/cudalink"
)

// EnvRequire is the environment variable that turns skips into failures.
const EnvRequire = pcudatest.EnvRequire

// Required reports whether the environment demands a GPU
// (DISTOPT_REQUIRE_GPU=1).
func Required() bool { return pcudatest.Required() }

// Unavailable handles err as cuda/cudatest.Unavailable does: nil returns;
// a missing driver or device, or an error matching extraKinds, skips the
// test (fails it when Required); any other error fails it.
func Unavailable(tb testing.TB, err error, extraKinds ...error) {
	tb.Helper()
	pcudatest.Unavailable(tb, err, extraKinds...)
}

// Require opens GPU 0 for the test, or skips/fails it as Unavailable says.
// When the test ends it checks that everything allocated through the
// returned Device was released (failing the test on a leak) and closes it.
func Require(tb testing.TB) *cuda.Device {
	tb.Helper()
	return cudalink.Device(pcudatest.Require(tb))
}

// RequireDevices opens GPUs 0..n-1 for the test, as Require does for one. A
// host with fewer than n GPUs counts as having none.
func RequireDevices(tb testing.TB, n int) []*cuda.Device {
	tb.Helper()
	var devs []*cuda.Device
	for _, d := range pcudatest.RequireDevices(tb, n) {
		devs = append(devs, cudalink.Device(d))
	}
	return devs
}

// Stream returns a new stream of d, destroyed when the test ends.
func Stream(tb testing.TB, d *cuda.Device) *cuda.Stream {
	tb.Helper()
	return cudalink.Stream(pcudatest.Stream(tb, cudalink.PublicDevice(d)))
}

// Event returns a new event of d (with timing when timing is true),
// destroyed when the test ends.
func Event(tb testing.TB, d *cuda.Device, timing bool) *cuda.Event {
	tb.Helper()
	return cudalink.Event(pcudatest.Event(tb, cudalink.PublicDevice(d), timing))
}

// Alloc returns n bytes of device memory of d, freed when the test ends.
func Alloc(tb testing.TB, d *cuda.Device, n int) cuda.DevicePtr {
	tb.Helper()
	return cuda.DevicePtr(pcudatest.Alloc(tb, cudalink.PublicDevice(d), n))
}

// AllocHost returns n bytes of pinned host memory of d, freed when the
// test ends.
func AllocHost(tb testing.TB, d *cuda.Device, n int) *cuda.HostBuffer {
	tb.Helper()
	return cudalink.HostBuffer(pcudatest.AllocHost(tb, cudalink.PublicDevice(d), n))
}

// GPUTime is cuda/cudatest.GPUTime on the handles of internal/cuda: the GPU's
// time per call of queue over b.N calls, by CUDA events on s.
func GPUTime(b *testing.B, d *cuda.Device, s *cuda.Stream, queue func() error) time.Duration {
	b.Helper()
	return pcudatest.GPUTime(b, cudalink.PublicDevice(d), cudalink.PublicStream(s), queue)
}
