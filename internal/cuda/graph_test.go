//go:build linux

package cuda_test

import (
	"bytes"
	"testing"

	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/cuda/cudatest"
)

// TestGraphCapture captures a host-to-device copy from pinned memory and a
// device-to-host copy back: Capturing is true during the capture (for the
// capturing stream and for a stream that joined it through an event) and
// false outside it, nothing runs until the launch, and each launch copies
// what the pinned source holds at launch time (a graph keeps addresses, not
// bytes).
func TestGraphCapture(t *testing.T) {
	d := cudatest.Require(t)
	const n = 1 << 16
	s, other := cudatest.Stream(t, d), cudatest.Stream(t, d)
	fork := cudatest.Event(t, d, false)
	in, out := cudatest.AllocHost(t, d, n), cudatest.AllocHost(t, d, n)
	p := cudatest.Alloc(t, d, n)
	capturing := func(st *cuda.Stream) bool {
		t.Helper()
		c, err := st.Capturing()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if capturing(s) || capturing(other) {
		t.Fatal("Capturing before BeginCapture")
	}
	if err := s.BeginCapture(cuda.CaptureThreadLocal); err != nil {
		t.Fatal(err)
	}
	if !capturing(s) || capturing(other) {
		t.Fatalf("during the capture: Capturing of the stream %v, of another %v; want true, false", capturing(s), capturing(other))
	}
	if !s.CaptureBegun() || other.CaptureBegun() {
		t.Fatalf("during the capture: CaptureBegun of the stream %v, of another %v; want true, false", s.CaptureBegun(), other.CaptureBegun())
	}
	// other joins the capture by waiting on an event recorded in it, does
	// the device-to-host copy, and is joined back.
	err := s.CopyHtoD(p, in.Bytes())
	if err == nil {
		err = fork.Record(s)
	}
	if err == nil {
		err = other.Wait(fork)
	}
	if err == nil && !capturing(other) {
		t.Error("a stream that waited on a captured event is not capturing")
	}
	if err == nil {
		err = other.CopyDtoH(out.Bytes(), p)
	}
	if err == nil {
		err = fork.Record(other)
	}
	if err == nil {
		err = s.Wait(fork)
	}
	g, endErr := s.EndCapture()
	if err != nil || endErr != nil {
		t.Fatalf("capture: %v; EndCapture: %v", err, endErr)
	}
	defer g.Destroy()
	if capturing(s) || capturing(other) || s.CaptureBegun() {
		t.Error("Capturing or CaptureBegun after EndCapture")
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), make([]byte, n)) {
		t.Fatal("the captured copies ran before the launch")
	}
	for seed := uint64(1); seed <= 2; seed++ {
		copy(in.Bytes(), randomBytes(n, seed))
		if err := g.Launch(s); err != nil {
			t.Fatal(err)
		}
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(in.Bytes(), out.Bytes()) {
			t.Errorf("launch %d: the bytes copied back differ from the pinned source's at launch time", seed)
		}
	}
}
