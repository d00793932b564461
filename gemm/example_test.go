package gemm_test

import (
	"errors"
	"fmt"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/gemm"
)

// Example runs the forward and backward products of one linear layer with
// per-tensor current scaling: the input and the output gradient are
// quantized on the device, the weight is an FP8 operand (from an optimizer
// it would come from gemm.Weight), and the weight gradient accumulates into
// a float32 buffer (from an optimizer, gemm.Gradient). On a host without a
// GPU or cuBLASLt it says so and stops.
func Example() {
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
		fmt.Println(err) // matches gemm.ErrUnavailable and names what is missing
		return
	}
	defer e.Close()

	// High-precision tensors of the layer (filled by the model).
	xHP, _ := d.Alloc(4 * T * in)
	dyHP, _ := d.Alloc(4 * T * out)
	wHP, _ := d.Alloc(4 * out * in)
	y, _ := d.Alloc(2 * T * out)
	dx, _ := d.Alloc(2 * T * in)
	dw, _ := d.Alloc(4 * out * in)
	for _, p := range []cuda.DevicePtr{xHP, dyHP, wHP, y, dx, dw} {
		defer d.Free(p)
	}
	s.Memset32(xHP, 0x3f800000, T*in)   // 1.0
	s.Memset32(dyHP, 0x3f000000, T*out) // 0.5
	s.Memset32(wHP, 0x3e800000, out*in) // 0.25
	s.Memset32(dw, 0, out*in)

	current := fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}
	grads := fp8.Recipe{Format: fp8.E5M2, Scaling: fp8.TensorCurrent}
	x, _ := gemm.AllocOperand(d, T, in, fp8.E4M3, gemm.PerTensor, false)
	dy, _ := gemm.AllocOperand(d, T, out, fp8.E5M2, gemm.PerTensor, false)
	w, _ := gemm.AllocOperand(d, out, in, fp8.E4M3, gemm.PerTensor, false)
	for _, o := range []gemm.Operand{x, dy, w} {
		defer gemm.FreeOperand(d, o)
	}
	e.Quantize(x, xHP, buffer.Float32, current, 0, 0)
	e.Quantize(dy, dyHP, buffer.Float32, grads, 0, 0)
	e.Quantize(w, wHP, buffer.Float32, current, 0, 0)

	fwd, _ := e.Forward(gemm.BF16(y), x, w)
	dgrad, _ := e.DGrad(gemm.BF16(dx), dy, w)
	wgrad, err := e.WGrad(gemm.Output{Data: dw, Type: buffer.Float32, Accumulate: true}, dy, x)
	if err != nil {
		fmt.Println(err)
		return
	}
	var dw0 [1]float32
	s.Download(cuda.Bytes(dw0[:]), dw)
	fmt.Println(fwd.Path, dgrad.Path, wgrad.Path)
	fmt.Printf("dgrad scratch %d bytes (one transposed weight), dw[0] = %v (256 tokens x 1 x 0.5)\n", dgrad.Scratch, dw0[0])
}

// ExampleBF16Bias runs a forward product whose bias cuBLASLt adds in its
// epilogue: y = bf16(x · wᵀ + b), one rounding, no float32 product written
// and no pass of its own for the bias. The bias is bfloat16, one element
// per output column.
func ExampleBF16Bias() {
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

	y, _ := d.Alloc(2 * T * out)
	b, _ := d.Alloc(2 * out)
	defer d.Free(y)
	defer d.Free(b)
	s.Memset32(b, 0x3f003f00, out/2) // 0.5 in bfloat16
	x, _ := gemm.AllocOperand(d, T, in, fp8.E4M3, gemm.PerTensor, false)
	w, _ := gemm.AllocOperand(d, out, in, fp8.E4M3, gemm.PerTensor, false)
	for _, o := range []gemm.Operand{x, w} {
		defer gemm.FreeOperand(d, o)
		s.Memset8(o.Data, 0x38, o.Rows*o.Cols) // 1.0 in E4M3
		s.Memset32(o.ScaleInv, 0x3f800000, 1)  // scale_inv 1
	}
	if _, err := e.Forward(gemm.BF16Bias(y, b), x, w); err != nil {
		fmt.Println(err) // matches gemm.ErrEpilogue where cuBLASLt has no kernel for it
		return
	}
	var y0 [1]uint16
	s.Download(cuda.Bytes(y0[:]), y)
	fmt.Printf("y[0] = %#04x (512 + 0.5 in bfloat16: 0x4400, the 0.5 rounded off)\n", y0[0])
}
