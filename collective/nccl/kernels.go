package nccl

import (
	_ "embed"
	"fmt"

	"github.com/distopt/distopt/internal/cuda"
)

//go:generate ./gen.sh

// transformPTX is transform.cu compiled by gen.sh.
//
//go:embed transform.ptx
var transformPTX []byte

// kernels is transform.ptx loaded on one device.
type kernels struct {
	m   *cuda.Module
	fns [numKernels]*cuda.Function
}

// blockSize is the number of threads of every block of the transforms.
const blockSize = 256

// maxBlocks bounds the grid of the transforms (grid-stride loops cover the
// rest).
const maxBlocks = 4096

func loadKernels(d *cuda.Device) (*kernels, error) {
	m, err := d.LoadModule(transformPTX)
	if err != nil {
		return nil, fmt.Errorf("collective/nccl: loading the transform kernels: %w", err)
	}
	k := &kernels{m: m}
	for i, name := range kernelNames {
		if k.fns[i], err = m.Function(name); err != nil {
			m.Unload()
			return nil, fmt.Errorf("collective/nccl: %w", err)
		}
	}
	return k, nil
}

func (k *kernels) unload() error { return k.m.Unload() }

// launch queues l on s; scratch is the base of the plan's scratch area.
func (k *kernels) launch(s *cuda.Stream, l launch, scratch uintptr) error {
	dst := cuda.DevicePtr(l.dst.resolve(scratch))
	src := cuda.DevicePtr(l.src.resolve(scratch))
	n := uint64(l.n)
	args := new(cuda.Args)
	switch l.k {
	case kDivF32:
		args.Ptr(dst).U64(n).F32(float32(l.divisor))
	case kDivF64:
		args.Ptr(dst).U64(n).F64(l.divisor)
	case kDivBF16:
		args.Ptr(dst).Ptr(src).U64(n).F32(float32(l.divisor))
	default:
		args.Ptr(dst).Ptr(src).U64(n)
	}
	blocks := min((l.n+blockSize-1)/blockSize, maxBlocks)
	return s.Launch(k.fns[l.k], cuda.Dim3{X: uint32(blocks)}, cuda.Dim3{X: blockSize}, 0, args)
}
