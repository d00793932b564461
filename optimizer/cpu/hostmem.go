package cpu

import (
	"errors"
	"fmt"
)

// ErrOutOfMemory marks an allocation larger than the memory it would come
// from: Go would end the process ("fatal error: out of memory"), which
// cannot be recovered, so the backend refuses it first.
var ErrOutOfMemory = errors.New("not enough memory")

// checkHostAlloc refuses a host allocation of n bytes that exceeds the RAM
// and swap of this host. Smaller allocations that together exceed it are
// not caught here.
func checkHostAlloc(n int) error {
	if total := hostMemory(); total > 0 && uint64(n) > total {
		return fmt.Errorf("cpu: alloc of %d bytes exceeds this host's memory (%d bytes of RAM and swap): %w", n, total, ErrOutOfMemory)
	}
	return nil
}
