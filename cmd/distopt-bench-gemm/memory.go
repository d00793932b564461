package main

import (
	"errors"
	"fmt"

	"github.com/distopt/distopt/buffer"
	pcuda "github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/gemm"
	"github.com/distopt/distopt/internal/cudalink"
)

// memory runs the forward and backward products of layers layers of the
// four shapes with a fresh engine per recipe and reports the device memory
// they added, against the model's size and the planner's prediction.
func (b *bench) memory(shapes []shape, recipes []recipe, layers int) error {
	fmt.Printf("\n## memory: %d layers x %d linear layers, forward + dgrad + wgrad each\n\n", layers, len(shapes))
	fmt.Println("| recipe | model FP8 bytes | free before | free after | growth | engine peak scratch | planner max | workspace |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	for _, r := range recipes {
		if err := b.memoryRecipe(shapes, r, layers); err != nil {
			return err
		}
	}
	return nil
}

func (b *bench) memoryRecipe(shapes []shape, r recipe, layers int) error {
	// The activations and gradients of one layer of each shape, shared.
	ops := make([]*operands, len(shapes))
	for i, sh := range shapes {
		o, err := b.alloc(sh, r)
		if err != nil {
			return err
		}
		defer o.release()
		ops[i] = o
	}
	// The model: every layer's weights, in FP8.
	var model []gemm.Operand
	modelBytes := 0
	defer func() {
		for _, w := range model {
			gemm.FreeOperand(cudalink.PublicDevice(b.d), w)
		}
	}()
	for range layers {
		for _, sh := range shapes {
			w, err := b.operand(sh.out, sh.in, r.wFmt, r.weight, false)
			if err != nil {
				return err
			}
			model = append(model, w)
			modelBytes += sh.out * sh.in
		}
	}
	e, err := gemm.New(cudalink.PublicDevice(b.d), cudalink.PublicStream(b.s))
	if err != nil {
		return err
	}
	defer e.Close()
	if err := b.s.Synchronize(); err != nil {
		return err
	}
	before, _, err := b.d.MemInfo()
	if err != nil {
		return err
	}
	planned := 0
	for l := range layers {
		for i, sh := range shapes {
			o, w := ops[i], model[l*len(shapes)+i]
			planned = max(planned, gemm.Scratch(gemm.ForwardProduct, o.x, w), gemm.Scratch(gemm.DGradProduct, o.dy, w),
				gemm.Scratch(gemm.WGradProduct, o.dyT, o.xT))
			_, e1 := e.Forward(gemm.BF16(pcuda.DevicePtr(o.y)), o.x, w)
			_, e2 := e.DGrad(gemm.BF16(pcuda.DevicePtr(o.dx)), o.dy, w)
			_, e3 := e.WGrad(gemm.Output{Data: pcuda.DevicePtr(o.dw), Type: buffer.Float32, Accumulate: true}, o.dyT, o.xT)
			if err := errors.Join(e1, e2, e3); err != nil {
				return fmt.Errorf("%s layer %d: %w", sh.name, l, err)
			}
		}
	}
	if err := b.s.Synchronize(); err != nil {
		return err
	}
	after, _, err := b.d.MemInfo()
	if err != nil {
		return err
	}
	fmt.Printf("| %s | %d | %d | %d | %d | %d | %d | %d |\n", r.name, modelBytes, before, after, int64(before)-int64(after),
		e.PeakScratch(), planned, gemm.WorkspaceBytes)
	return nil
}
