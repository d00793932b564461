//go:build linux

package cuda_test

import (
	"encoding/binary"
	"testing"

	"github.com/distopt/distopt/internal/cuda/cudatest"
)

// TestStreamValue checks the stream memory operations: a stream that
// waits for a word to reach a value is held (its later work not run, the
// stream not complete) until another stream writes the word, queued after
// the wait; then it runs; a wait for a value the word already passes (at
// least, in the cyclic order) does not hold; and the order wraps around.
func TestStreamValue(t *testing.T) {
	d := cudatest.Require(t)
	waiter, writer := cudatest.Stream(t, d), cudatest.Stream(t, d)
	flag, out := cudatest.Alloc(t, d, 4), cudatest.Alloc(t, d, 4)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(waiter.Memset32(flag, 0, 1))
	must(waiter.Memset32(out, 0, 1))
	must(waiter.Synchronize())
	must(waiter.WaitValue32(flag, 5))
	must(waiter.Memset32(out, 1, 1))
	if done, err := waiter.Query(); err != nil || done {
		t.Fatalf("a stream waiting for a word nobody wrote: complete %t (%v)", done, err)
	}
	must(writer.WriteValue32(flag, 7))
	must(waiter.Synchronize())
	var b [4]byte
	must(waiter.Download(b[:], out))
	if v := binary.LittleEndian.Uint32(b[:]); v != 1 {
		t.Errorf("the work after the wait wrote %d, want 1", v)
	}
	must(waiter.Download(b[:], flag))
	if v := binary.LittleEndian.Uint32(b[:]); v != 7 {
		t.Errorf("the word is %d, want 7", v)
	}
	must(waiter.WaitValue32(flag, 6)) // 7 >= 6: passes at once
	must(waiter.Memset32(out, 2, 1))
	must(waiter.Synchronize())
	must(waiter.Download(b[:], out))
	if v := binary.LittleEndian.Uint32(b[:]); v != 2 {
		t.Errorf("after a wait already satisfied: %d, want 2", v)
	}
	// the order is cyclic: 0xffffffff is below 1, 1 is past 0xffffffff
	must(writer.WriteValue32(flag, 0xffffffff))
	must(writer.Synchronize())
	must(waiter.WaitValue32(flag, 1))
	must(waiter.Memset32(out, 3, 1))
	if done, err := waiter.Query(); err != nil || done {
		t.Fatalf("a wait for 1 with the word at 0xffffffff: complete %t (%v), want held", done, err)
	}
	must(writer.WriteValue32(flag, 1))
	must(waiter.Synchronize())
	must(waiter.Download(b[:], out))
	if v := binary.LittleEndian.Uint32(b[:]); v != 3 {
		t.Errorf("after the word wrapped to 1: %d, want 3", v)
	}
}
