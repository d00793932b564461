//go:build !unix && !windows

package checkpoint

// nonBlocking is 0 where the system has no non-blocking open (and no
// named pipes to guard against).
const nonBlocking = 0
