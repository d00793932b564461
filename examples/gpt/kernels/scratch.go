package kernels

import (
	"fmt"
	"sync"

	"github.com/distopt/distopt/cuda"
)

// scratchAlign rounds scratch buffers up to a whole number of MiB, so that
// shapes that differ a little share one buffer.
const scratchAlign = 1 << 20

// scratchPool is the device memory in which two-pass kernels (the column
// reductions of gptcols.cu, the split weight gradient of gpthead.cu) keep
// their partial sums between the passes: one buffer per stream, since only
// work queued on one stream is ordered. A buffer grows on demand and lives
// until Set.Close.
type scratchPool struct {
	mu   sync.Mutex
	bufs map[*cuda.Stream]scratchBuf
}

type scratchBuf struct {
	p cuda.DevicePtr
	n int
}

// scratch returns s's scratch buffer of at least n bytes. Growing it waits
// for the work queued on s (which may still read the old buffer) before
// freeing the old one, so it is best done once, by the first call at the
// largest shape.
func (k *Set) scratch(s *cuda.Stream, n int) (cuda.DevicePtr, error) {
	k.pool.mu.Lock()
	defer k.pool.mu.Unlock()
	b := k.pool.bufs[s]
	if b.n >= n {
		return b.p, nil
	}
	if b.n > 0 {
		if err := s.Synchronize(); err != nil {
			return 0, fmt.Errorf("kernels: growing scratch: %w", err)
		}
		if err := k.d.Free(b.p); err != nil {
			return 0, fmt.Errorf("kernels: growing scratch: %w", err)
		}
		delete(k.pool.bufs, s)
	}
	size := (n + scratchAlign - 1) / scratchAlign * scratchAlign
	p, err := k.d.Alloc(size)
	if err != nil {
		return 0, fmt.Errorf("kernels: scratch of %d bytes: %w", size, err)
	}
	if k.pool.bufs == nil {
		k.pool.bufs = map[*cuda.Stream]scratchBuf{}
	}
	k.pool.bufs[s] = scratchBuf{p, size}
	return p, nil
}

// ScratchBytes returns the device memory the Set holds as scratch, over
// every stream.
func (k *Set) ScratchBytes() int {
	k.pool.mu.Lock()
	defer k.pool.mu.Unlock()
	n := 0
	for _, b := range k.pool.bufs {
		n += b.n
	}
	return n
}

// freeScratch releases every scratch buffer; the first error is returned.
func (k *Set) freeScratch() error {
	k.pool.mu.Lock()
	defer k.pool.mu.Unlock()
	var first error
	for s, b := range k.pool.bufs {
		if err := k.d.Free(b.p); err != nil && first == nil {
			first = err
		}
		delete(k.pool.bufs, s)
	}
	return first
}
