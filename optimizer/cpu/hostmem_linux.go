package cpu

import "syscall"

// hostMemory returns the bytes of RAM and swap of this host, or 0 if it
// cannot tell.
func hostMemory() uint64 {
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) != nil {
		return 0
	}
	return (uint64(si.Totalram) + uint64(si.Totalswap)) * uint64(si.Unit)
}
