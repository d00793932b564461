package fp8

import (
	"runtime"
	"sync"
)

// parallelMin is the number of elements from which the CPU kernels split
// their work across goroutines. Results never depend on the split.
const parallelMin = 1 << 16

// chunks returns how many pieces parallel splits n elements into.
func chunks(n int) int {
	if n < parallelMin {
		return 1
	}
	return max(1, min(runtime.GOMAXPROCS(0), n/(parallelMin/2)))
}

// parallel calls fn(k, lo, hi) for chunks(n) contiguous pieces [lo, hi) of
// [0, n), k = 0, 1, ..., concurrently when there is more than one, and
// returns when all have returned. Every inner boundary b satisfies
// (phase+b) % align == 0, so that blocks of align elements starting at
// absolute index -phase are never split; pieces may therefore be empty.
func parallel(n, phase, align int, fn func(k, lo, hi int)) {
	c := chunks(n)
	if c == 1 {
		fn(0, 0, n)
		return
	}
	bound := func(k int) int {
		switch k {
		case 0:
			return 0
		case c:
			return n
		}
		t := phase + k*(n/c)
		return min(n, (t+align-1)/align*align-phase)
	}
	var wg sync.WaitGroup
	for k := range c {
		lo, hi := bound(k), bound(k+1)
		wg.Go(func() { fn(k, lo, hi) })
	}
	wg.Wait()
}

// parallelMax runs kernel over the pieces of parallel(len(src), 0, 1, ...)
// and returns the maximum of the uint32 results (0 for an empty src).
func parallelMax(n int, kernel func(lo, hi int) uint32) uint32 {
	parts := make([]uint32, chunks(n))
	parallel(n, 0, 1, func(k, lo, hi int) { parts[k] = kernel(lo, hi) })
	var m uint32
	for _, p := range parts {
		m = max(m, p)
	}
	return m
}
