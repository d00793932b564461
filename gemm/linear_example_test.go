package gemm_test

import (
	"errors"
	"fmt"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/gemm"
)

// ExampleLinear runs one step of a linear layer that keeps its input for
// backward in FP8 only (per-tensor current scaling): Forward quantizes the
// bfloat16 input once and keeps those bytes, Backward makes the transposes
// the weight gradient reads transiently. PlanLinear predicts what the layer
// keeps; KeptBytes reports it. With an optimizer the weight comes from
// gemm.Weight and the gradient output from gemm.Gradient.
func ExampleLinear() {
	const T, in, out = 256, 512, 384
	d, err := cuda.Open(0)
	if errors.Is(err, cuda.ErrNoDriver) || errors.Is(err, cuda.ErrNoDevice) {
		fmt.Println("no GPU")
		return
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Close()
	s, _ := d.NewStream()
	defer s.Destroy()
	e, err := gemm.New(d, s)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close()

	x, _ := d.Alloc(2 * T * in)   // bfloat16 input
	dy, _ := d.Alloc(2 * T * out) // bfloat16 output gradient
	y, _ := d.Alloc(2 * T * out)
	dx, _ := d.Alloc(2 * T * in)
	dw, _ := d.Alloc(4 * out * in)
	for _, p := range []cuda.DevicePtr{x, dy, y, dx, dw} {
		defer d.Free(p)
	}
	s.Memset32(x, 0x3f803f80, T*in/2)   // 1.0
	s.Memset32(dy, 0x3f003f00, T*out/2) // 0.5
	s.Memset32(dw, 0, out*in)
	w, _ := gemm.AllocOperand(d, out, in, fp8.E4M3, gemm.PerTensor, false)
	defer gemm.FreeOperand(d, w)
	s.Memset8(w.Data, 0x30, out*in)       // 0.25 in E4M3
	s.Memset32(w.ScaleInv, 0x3f800000, 1) // scale_inv 1

	cfg := gemm.LinearConfig{In: in, Out: out,
		X:  fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent},
		DY: fp8.Recipe{Format: fp8.E5M2, Scaling: fp8.TensorCurrent}}
	plan, _ := gemm.PlanLinear(cfg, T, gemm.PerTensor)
	l, _ := e.NewLinear(cfg)
	defer l.Release()
	if _, err := l.Forward(gemm.BF16(y), x, T, w); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("kept %d bytes (predicted %d, bfloat16 would keep %d)\n", l.KeptBytes(), plan.Kept, plan.BF16)
	grad := gemm.Output{Data: dw, Type: buffer.Float32, Accumulate: true}
	if _, _, err := l.Backward(gemm.BF16(dx), grad, dy, w); err != nil {
		fmt.Println(err)
		return
	}
	var dw0 [1]float32
	s.Download(cuda.Bytes(dw0[:]), dw)
	fmt.Printf("dw[0] = %v (256 tokens x 0.5 x 1)\n", dw0[0])
}
