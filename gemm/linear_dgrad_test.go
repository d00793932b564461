package gemm

import (
	"math"
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/fp8"
)

// TestLinearDGradBF16 runs the layer of cuDNN's attention output in
// examples/gpt (bfloat16 input, float32 output gradient) through Backward
// twice on the same operands, dx in float32 then in bfloat16, for both
// activation recipes. The bfloat16 dx must be, element by element,
// within one bfloat16 ulp of the float32 dx rounded to nearest even on
// the CPU (the separate rounding pass it replaces). Both round the same
// float32 sums when cuBLASLt runs the same algorithm for both output
// types; another algorithm sums in another order, and a sum near a
// rounding boundary then lands one ulp away. How many differ is logged.
func TestLinearDGradBF16(t *testing.T) {
	e := newEngine(t)
	const T, in, out = 256, 128, 384
	for _, c := range linearCases[:2] {
		t.Run(c.name, func(t *testing.T) {
			w := weight(t, randMatrix(in, out, 11), in, out, c.w).upload(t, e)
			cfg := linearConfig(c.base, out, in, false)
			cfg.Input, cfg.GradInput = buffer.BFloat16, buffer.Float32
			l, err := e.NewLinear(cfg)
			must(t, err)
			t.Cleanup(func() { l.Release() })
			x, dy := devAlloc(t, e.d, 2*T*out), devAlloc(t, e.d, 4*T*in)
			must(t, e.s.Upload(x, encode(bf16Values(randMatrix(T, out, 12)), buffer.BFloat16)))
			must(t, e.s.Upload(dy, encode(randMatrix(T, in, 13), buffer.Float32)))
			y, dw := devAlloc(t, e.d, 2*T*in), devAlloc(t, e.d, 4*in*out)
			// run queues Forward and Backward with dx of type dt and
			// returns dx's values.
			run := func(dt buffer.DType) []float32 {
				dx := devAlloc(t, e.d, dt.Size()*T*out)
				_, err := l.Forward(BF16(cuda.DevicePtr(y)), cuda.DevicePtr(x), T, w)
				must(t, err)
				_, _, err = l.Backward(Output{Data: cuda.DevicePtr(dx), Type: dt}, Output{Data: cuda.DevicePtr(dw), Type: buffer.Float32}, cuda.DevicePtr(dy), w)
				must(t, err)
				raw := make([]byte, dt.Size()*T*out)
				must(t, e.s.Download(raw, dx))
				return decodeOut(raw, dt)
			}
			f32, b16 := run(buffer.Float32), run(buffer.BFloat16)
			differ := 0
			for i, v := range f32 {
				want := fp8.RoundBF16(v)
				if b16[i] == want {
					continue
				}
				differ++
				if d := math.Abs(float64(b16[i]) - float64(want)); !(d <= bf16Ulp(float64(want))) {
					t.Fatalf("dx[%d]: %g in bfloat16, %g rounded from float32 (%g)", i, b16[i], want, v)
				}
			}
			t.Logf("%d of %d elements differ by one ulp from the rounded float32 dx", differ, len(f32))
		})
	}
}
