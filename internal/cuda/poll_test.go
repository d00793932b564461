package cuda

import (
	"strings"
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

// TestHopSpinFromEnv checks Open's polling of a hand-over: the
// environment's duration, a clear error for a bad one, and none without
// it.
func TestHopSpinFromEnv(t *testing.T) {
	t.Setenv(EnvHopSpin, "35us")
	if d, err := hopSpinFromEnv(); d != 35*time.Microsecond || err != nil {
		t.Errorf("35us: %v, %v", d, err)
	}
	t.Setenv(EnvHopSpin, "0")
	if d, err := hopSpinFromEnv(); d != 0 || err != nil {
		t.Errorf("0: %v, %v", d, err)
	}
	for _, bad := range []string{"fast", "-1us", "20"} {
		t.Setenv(EnvHopSpin, bad)
		if _, err := hopSpinFromEnv(); err == nil || !strings.Contains(err.Error(), EnvHopSpin) {
			t.Errorf("%q: error %v, want one naming %s", bad, err, EnvHopSpin)
		}
	}
	t.Setenv(EnvHopSpin, "")
	if d, err := hopSpinFromEnv(); d != 0 || err != nil {
		t.Errorf("unset: %v, %v; want 0", d, err)
	}
}
