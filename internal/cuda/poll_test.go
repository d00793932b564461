package cuda

import (
	"testing"
	"time"
)

// TestPoll checks the receive of a hand-over with and without polling: a
// value already there, one that comes after the polling ended (the
// blocking receive takes it), and a closed channel.
func TestPoll(t *testing.T) {
	for _, spin := range []time.Duration{0, 20 * time.Microsecond} {
		c := make(chan int, 1)
		c <- 7
		if v, ok := poll(c, spin); v != 7 || !ok {
			t.Errorf("spin %v: a waiting value: %d, %t", spin, v, ok)
		}
		go func() {
			time.Sleep(5 * time.Millisecond)
			c <- 8
		}()
		if v, ok := poll(c, spin); v != 8 || !ok {
			t.Errorf("spin %v: a late value: %d, %t", spin, v, ok)
		}
		close(c)
		if v, ok := poll(c, spin); v != 0 || ok {
			t.Errorf("spin %v: a closed channel: %d, %t", spin, v, ok)
		}
	}
}
