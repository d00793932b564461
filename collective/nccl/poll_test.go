package nccl

import (
	"testing"
	"time"
)

// TestPoller checks the two phases of a wait's pacing: no timer (hence no
// millisecond floor) while it spins, a sleep of at least pollSleep after,
// and an immediate false once stop is closed in either phase.
func TestPoller(t *testing.T) {
	closed := make(chan struct{})
	close(closed)
	for _, tc := range []struct {
		name    string
		age     time.Duration // of the wait when pause is called
		stop    <-chan struct{}
		want    bool
		sleeps  bool // pause must take at least pollSleep
		timerOn bool // the poller must have created its timer
	}{
		{"spinning", 0, nil, true, false, false},
		{"spinning, stopped", 0, closed, false, false, false},
		{"sleeping", 2 * pollSpinFor, nil, true, true, true},
		{"sleeping, stopped", 2 * pollSpinFor, closed, false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPoller()
			defer p.release()
			p.start = p.start.Add(-tc.age)
			for i := range 3 { // the timer is reused
				t0 := time.Now()
				got := p.pause(tc.stop)
				took := time.Since(t0)
				if got != tc.want {
					t.Fatalf("pause %d = %v, want %v", i, got, tc.want)
				}
				if tc.sleeps && took < pollSleep {
					t.Errorf("pause %d took %v, want at least %v", i, took, pollSleep)
				}
				if !tc.sleeps && took > 100*time.Millisecond {
					t.Errorf("pause %d took %v, want no sleep", i, took)
				}
				if (p.timer != nil) != tc.timerOn {
					t.Errorf("pause %d: timer created %v, want %v", i, p.timer != nil, tc.timerOn)
				}
			}
		})
	}
}
