package gemm

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/cuda"
	icuda "github.com/distopt/distopt/internal/cuda"
)

// TestBackwardAmaxRefusesBlocks checks that BackwardAmax refuses a caller's
// amax for 1x128 blocks (no tensor amax) before touching the device.
func TestBackwardAmaxRefusesBlocks(t *testing.T) {
	l := &Linear{c: linearConfig(blockLinear, 128, 128, false), ready: true}
	if _, _, err := l.BackwardAmax(Output{}, Output{}, 0, 4, Operand{Rows: 128, Cols: 128}); !errors.Is(err, ErrLayout) {
		t.Errorf("BackwardAmax of 1x128 blocks: %v, want ErrLayout", err)
	}
}

// TestGradInputRefused checks that a GradInput other than bfloat16 or
// float32 is refused, and that GradInput changes no memory figure.
func TestGradInputRefused(t *testing.T) {
	c := linearConfig(perTensorLinear, 64, 32, false)
	c.GradInput = buffer.Uint8
	if _, err := PlanLinear(c, 64, PerTensor); !errors.Is(err, ErrLayout) {
		t.Errorf("GradInput uint8: %v, want ErrLayout", err)
	}
	for _, base := range []LinearConfig{perTensorLinear, blockLinear} {
		c := linearConfig(base, 256, 128, false)
		a, err1 := PlanLinear(c, 256, Tiles128)
		c.GradInput = buffer.BFloat16
		b, err2 := PlanLinear(c, 256, Tiles128)
		if err := errors.Join(err1, err2); err != nil || a != b {
			t.Errorf("%v: GradInput bfloat16 plans %+v, float32 %+v (%v)", base.X, b, a, err)
		}
	}
}

// TestLinearBackwardAmax runs a per-tensor layer with a float32 input and a
// float32 or bfloat16 output gradient (GradInput) through Backward, then
// through BackwardAmax given the amax key computed on the CPU: dx and dw
// must be the same bits, and the quantized dy both made must be the CPU's
// quantization (fp8.ScaleFromAmax of fp8.Amax, fp8.CastScaled). A key of
// twice the amax must change dy's scale (the key is read, not recomputed).
func TestLinearBackwardAmax(t *testing.T) {
	e := newEngine(t)
	const T, in, out = 256, 128, 192
	c := linearCase{"per-tensor", perTensorLinear, e4Current}
	hw := weight(t, randMatrix(out, in, 7), out, in, c.w)
	w := hw.upload(t, e)
	xv := randMatrix(T, in, 8)
	for _, gt := range []buffer.DType{buffer.Float32, buffer.BFloat16} {
		t.Run(fmt.Sprint(gt), func(t *testing.T) {
			dyv := randMatrix(T, out, 9)
			if gt == buffer.BFloat16 {
				dyv = bf16Values(dyv)
			}
			_, hdy, _, _ := linearRefs(t, c, xv, dyv, T, in, out)
			cfg := linearConfig(c.base, in, out, false)
			cfg.Input, cfg.GradInput = buffer.Float32, gt
			l, err := e.NewLinear(cfg)
			must(t, err)
			t.Cleanup(func() { l.Release() })
			size := map[buffer.DType]int{buffer.BFloat16: 2, buffer.Float32: 4}[gt]
			x, dy := devAlloc(t, e.d, 4*T*in), devAlloc(t, e.d, size*T*out)
			must(t, e.s.Upload(x, encode(xv, buffer.Float32)))
			must(t, e.s.Upload(dy, encode(dyv, gt)))
			y, dx, dw, amax := devAlloc(t, e.d, 2*T*out), devAlloc(t, e.d, 2*T*in), devAlloc(t, e.d, 4*out*in), devAlloc(t, e.d, 4)
			// run queues Forward and Backward (BackwardAmax with the key
			// when key is not 0) and returns dx, dw and the quantized dy.
			run := func(key uint32) (dxb, dwb []byte, q hostOperand) {
				_, err := l.Forward(BF16(cuda.DevicePtr(y)), cuda.DevicePtr(x), T, w)
				must(t, err)
				a := cuda.DevicePtr(0)
				if key != 0 {
					must(t, e.s.Upload(amax, icuda.Bytes([]uint32{key})))
					a = cuda.DevicePtr(amax)
				}
				_, _, err = l.BackwardAmax(BF16(cuda.DevicePtr(dx)), Output{Data: cuda.DevicePtr(dw), Type: buffer.Float32}, cuda.DevicePtr(dy), a, w)
				must(t, err)
				dxb, dwb = make([]byte, 2*T*in), make([]byte, 4*out*in)
				must(t, e.s.Download(dxb, dx))
				must(t, e.s.Download(dwb, dw))
				return dxb, dwb, download(t, e, cfg.backwardScratch(&arena{base: e.act}, T).dy)
			}
			dx0, dw0, q0 := run(0)
			m := float32(0)
			for _, v := range dyv {
				m = max(m, float32(math.Abs(float64(v))))
			}
			dx1, dw1, q1 := run(math.Float32bits(m))
			sameOperand(t, "Backward's dy", q0, hdy)
			sameOperand(t, "BackwardAmax's dy", q1, hdy)
			if !bytes.Equal(dx0, dx1) || !bytes.Equal(dw0, dw1) {
				t.Errorf("BackwardAmax's dx or dw differ from Backward's")
			}
			if _, _, q2 := run(math.Float32bits(2 * m)); bytes.Equal(q2.scales, hdy.scales) {
				t.Errorf("a key of twice the amax left dy's scale_inv at %x", q2.scales)
			}
		})
	}
}
