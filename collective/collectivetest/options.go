package collectivetest

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
)

// Options configures the suite. The zero value tests host-memory backends.
type Options struct {
	// Sizes are the world sizes Run tests (default 1, 2, 3, 4, 7, 8).
	Sizes []int
	// LargeBytes is about the size of the large buffers (default 1 MiB;
	// all-gather destinations are about 2*LargeBytes).
	LargeBytes int
	// Timeout bounds every case of Run and RunRank (default 60 s).
	Timeout time.Duration
	// Deadline is the short deadline of the abort checks (default 300 ms).
	// Prompt means within Deadline plus Slack (default 2 s).
	Deadline, Slack time.Duration
	// Seed makes the inputs of Run (RunRank takes its own).
	Seed int64

	// Alloc returns a buffer of n bytes that c accepts (default: a new
	// buffer.HostBuffer).
	Alloc func(c collective.Communicator, n int) (buffer.Buffer, error)
	// Free releases a buffer of Alloc (default: nothing).
	Free func(b buffer.Buffer) error
	// Upload copies data (len(data) == b.Len()) into b (default: copy into
	// a HostBuffer).
	Upload func(b buffer.Buffer, data []byte) error
	// Download copies b into dst (len(dst) == b.Len()) (default: copy from
	// a HostBuffer).
	Download func(b buffer.Buffer, dst []byte) error
	// Slice returns bytes [lo, hi) of b, sharing its memory (default:
	// b.Slice).
	Slice func(b buffer.Buffer, lo, hi int) buffer.Buffer
}

func (o Options) withDefaults() Options {
	if len(o.Sizes) == 0 {
		o.Sizes = []int{1, 2, 3, 4, 7, 8}
	}
	if o.LargeBytes <= 0 {
		o.LargeBytes = 1 << 20
	}
	if o.Timeout <= 0 {
		o.Timeout = time.Minute
	}
	if o.Deadline <= 0 {
		o.Deadline = 300 * time.Millisecond
	}
	if o.Slack <= 0 {
		o.Slack = 2 * time.Second
	}
	if o.Alloc == nil {
		o.Alloc = func(_ collective.Communicator, n int) (buffer.Buffer, error) {
			return make(buffer.HostBuffer, n), nil
		}
	}
	if o.Free == nil {
		o.Free = func(buffer.Buffer) error { return nil }
	}
	if o.Upload == nil {
		o.Upload = func(b buffer.Buffer, data []byte) error {
			h, ok := b.(buffer.HostBuffer)
			if !ok {
				return fmt.Errorf("collectivetest: default Upload needs a HostBuffer, got %T", b)
			}
			copy(h, data)
			return nil
		}
	}
	if o.Download == nil {
		o.Download = func(b buffer.Buffer, dst []byte) error {
			h, ok := b.(buffer.HostBuffer)
			if !ok {
				return fmt.Errorf("collectivetest: default Download needs a HostBuffer, got %T", b)
			}
			copy(dst, h)
			return nil
		}
	}
	if o.Slice == nil {
		o.Slice = func(b buffer.Buffer, lo, hi int) buffer.Buffer { return b.Slice(lo, hi) }
	}
	return o
}

// CheckGoroutines fails tb at its cleanup if goroutines started during the
// test are still running five seconds after it, printing every stack.
// Tests of a backend call it first, so that Close is checked to end what the
// communicator started.
func CheckGoroutines(tb testing.TB) {
	before := runtime.NumGoroutine()
	tb.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				tb.Errorf("goroutines leaked: %d before, %d after\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}
