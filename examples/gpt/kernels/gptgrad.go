package kernels

import (
	"fmt"

	"github.com/distopt/distopt/cuda"
)

// kernelGPTGradAccBF16 is the kernel of gptgrad.cu.
const kernelGPTGradAccBF16 = "gpt_grad_accumulate_bf16"

// accList is gptgrad.cu's ACC_LIST: the sums one launch takes.
const accList = 8

// gradKernels lists the kernels of gptgrad.cu.
func gradKernels() []string { return []string{kernelGPTGradAccBF16} }

// BF16Sum is one float32 gradient Sum of N elements to add into its
// bfloat16 gradient view View (GPTAccumulateBF16s).
type BF16Sum struct {
	View, Sum cuda.DevicePtr
	N         int
}

// GPTAccumulateBF16 queues dst[i] = bf16(f32(dst[i]) + src[i]) for i < n:
// a float32 gradient src added into a bfloat16 gradient view dst, the
// float32 sum rounded once to the nearest bfloat16 (ties to even; overflow
// to ±Inf; NaN gives 0x7fff), as bf16.FromFloat32 does on the host. dst and
// src must not overlap.
func (k *Set) GPTAccumulateBF16(s *cuda.Stream, dst, src cuda.DevicePtr, n int) error {
	return k.GPTAccumulateBF16s(s, []BF16Sum{{View: dst, Sum: src, N: n}})
}

// GPTAccumulateBF16s queues GPTAccumulateBF16 of each sum, in one launch
// for up to eight of them (a layer's small parameters): the same bits.
// No sum may overlap another's view. A negative length is an error
// before anything is queued.
func (k *Set) GPTAccumulateBF16s(s *cuda.Stream, sums []BF16Sum) error {
	for _, e := range sums {
		if e.N < 0 {
			return fmt.Errorf("kernels: %s of %d elements", kernelGPTGradAccBF16, e.N)
		}
	}
	for len(sums) > 0 {
		group := sums[:min(len(sums), accList)]
		sums = sums[len(group):]
		args, most := new(cuda.Args), 0
		for j := range accList {
			var e BF16Sum
			if j < len(group) {
				e = group[j]
			}
			args.Ptr(e.View).Ptr(e.Sum).U64(uint64(e.N))
			most = max(most, e.N)
		}
		if most == 0 {
			continue
		}
		blocks := min(ceilDiv(most, blockSize), blocksPerSM*max(k.sms, 1))
		grid := cuda.Dim3{X: uint32(blocks), Y: uint32(len(group))}
		if err := k.launchGrid(s, kernelGPTGradAccBF16, grid, blockSize, args); err != nil {
			return err
		}
	}
	return nil
}
