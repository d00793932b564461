//go:build unix || windows

package checkpoint

import "syscall"

// nonBlocking is the open flag that keeps an open of a named pipe from
// waiting for a writer.
const nonBlocking = syscall.O_NONBLOCK
