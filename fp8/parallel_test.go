package fp8

import (
	"fmt"
	"sync"
	"testing"
)

// TestParallelSplit checks that parallel covers [0, n) exactly once with
// contiguous pieces whose inner boundaries are aligned.
func TestParallelSplit(t *testing.T) {
	for _, n := range []int{0, 1, parallelMin - 1, parallelMin, 3*parallelMin + 5, 1 << 20} {
		for _, pa := range [][2]int{{0, 1}, {0, 128}, {5, 32}, {77, 300 * 128}, {1000, 7}} {
			phase, align := pa[0], pa[1]
			t.Run(fmt.Sprintf("n=%d/phase=%d/align=%d", n, phase, align), func(t *testing.T) {
				var mu sync.Mutex
				got := map[int][2]int{}
				parallel(n, phase, align, func(k, lo, hi int) {
					mu.Lock()
					got[k] = [2]int{lo, hi}
					mu.Unlock()
				})
				if len(got) != chunks(n) {
					t.Fatalf("%d pieces, want %d", len(got), chunks(n))
				}
				next := 0
				for k := range len(got) {
					p := got[k]
					if p[0] != next || p[1] < p[0] {
						t.Fatalf("piece %d = %v, want start %d", k, p, next)
					}
					if k > 0 && p[0] < n && (phase+p[0])%align != 0 {
						t.Fatalf("piece %d starts at %d, not aligned", k, p[0])
					}
					next = p[1]
				}
				if next != n {
					t.Fatalf("pieces end at %d, want %d", next, n)
				}
			})
		}
	}
}
