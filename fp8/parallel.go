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

// parallel calls fn(k, lo, hi) for the chunks(n) contiguous pieces [lo, hi)
// of [0, n), k = 0, 1, ..., concurrently when there is more than one, and
// returns when all have returned. Piece boundaries are multiples of 128, so
// that blocks of 32 or 128 elements are never split.
func parallel(n int, fn func(k, lo, hi int)) {
	c := chunks(n)
	if c == 1 {
		fn(0, 0, n)
		return
	}
	step := (n/c + 127) &^ 127
	var wg sync.WaitGroup
	for k := range c {
		lo, hi := min(k*step, n), min((k+1)*step, n)
		if k == c-1 {
			hi = n
		}
		wg.Go(func() { fn(k, lo, hi) })
	}
	wg.Wait()
}
