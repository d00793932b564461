//go:build !linux

package cpu

// hostMemory returns 0: the size of memory is not known on this system.
func hostMemory() uint64 { return 0 }
