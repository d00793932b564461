package kernels

import "github.com/distopt/distopt/internal/cuda"

// kernelIota is the kernel of fill.cu.
const kernelIota = "fill_iota_u32"

// FillIota queues on s, for i < n: dst[i] = base + i (mod 2^32), where dst
// holds uint32. Viewed as float32, dst then holds the bit patterns base,
// base+1, ..., which is how the exhaustive tests produce every float32 on
// the device. It panics for a negative n.
func (k *Set) FillIota(s *cuda.Stream, dst cuda.DevicePtr, base uint32, n int) error {
	const name = kernelIota
	if !checkLen(name, n) {
		return nil
	}
	return k.launch1D(s, name, n, 4, new(cuda.Args).Ptr(dst).U32(base).U64(uint64(n)))
}
