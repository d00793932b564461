package inproc_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/collectivetest"
	"github.com/distopt/distopt/collective/inproc"
)

// checkLeaks fails t if goroutines started during the test are still
// running a while after it.
func checkLeaks(t *testing.T) {
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				t.Errorf("goroutines leaked: %d before, %d after\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

func TestConformance(t *testing.T) {
	checkLeaks(t)
	collectivetest.Run(t, func(t *testing.T, n int) []collective.Communicator {
		return inproc.Communicators(n)
	}, collectivetest.Options{Seed: 1})
}
