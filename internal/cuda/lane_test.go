//go:build linux

package cuda_test

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/cuda/cudatest"
)

// TestLane checks a device's lane: its Do runs on one OS thread, not the
// worker's, with the context current (an allocation there works), calls
// from inside it run directly; and it makes progress while the worker is
// blocked in a call that waits for the GPU: a stream waiting for a word
// that only the lane writes completes, and the worker's Synchronize of it
// returns. A Do after Close fails with ErrClosed.
func TestLane(t *testing.T) {
	d := cudatest.Require(t)
	l, err := d.NewLane()
	if err != nil {
		t.Fatal(err)
	}
	var worker, lane, nested int
	must(t, d.Do(func() error { worker = syscall.Gettid(); return nil }))
	must(t, l.Do(func() error {
		lane = syscall.Gettid()
		p, err := d.Alloc(256) // runs here: the context is current
		if err != nil {
			return err
		}
		if err := l.Do(func() error { nested = syscall.Gettid(); return nil }); err != nil {
			return err
		}
		return d.Free(p)
	}))
	if lane == worker || nested != lane {
		t.Errorf("lane thread %d, nested call on %d, worker %d: want the lane on a thread of its own", lane, nested, worker)
	}

	waiter, writer := cudatest.Stream(t, d), cudatest.Stream(t, d)
	word := cudatest.Alloc(t, d, 4)
	must(t, writer.Memset32(word, 0, 1))
	must(t, writer.Synchronize())
	must(t, waiter.WaitValue32(word, 1))
	synced := make(chan error, 1)
	go func() { synced <- waiter.Synchronize() }() // holds the worker until the word is written
	for d.HostSyncs() == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(10 * time.Millisecond) // most likely inside cuStreamSynchronize by now (either order must work)
	wrote := make(chan error, 1)
	go func() { wrote <- l.Do(func() error { return writer.WriteValue32(word, 1) }) }()
	for _, c := range []chan error{wrote, synced} {
		select {
		case err := <-c:
			must(t, err)
		case <-time.After(time.Minute): // a guard against a hang, not a measurement
			t.Fatal("the lane did not write the word while the worker waited for it")
		}
	}
	must(t, l.Close())
	if err := l.Do(func() error { return nil }); !errors.Is(err, cuda.ErrClosed) {
		t.Errorf("Do after Close: %v, want ErrClosed", err)
	}
	if err := l.Close(); !errors.Is(err, cuda.ErrClosed) {
		t.Errorf("second Close: %v, want ErrClosed", err)
	}
}
