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

// TestCallerCastsDYPlan checks CallerCastsDY without a GPU: refused for
// 1x128 blocks; Backward and BackwardAmax refused on such a layer and
// BackwardCast on another, before touching the device; and the memory it
// moves: the transposed codes, tokens*Out bytes, join the activation
// buffer and leave the products' scratch, whose weight gradient then
// transposes only the input (Products no more than the plain layer's,
// less where the weight gradient set it, and at least that product's
// scratch less those bytes).
func TestCallerCastsDYPlan(t *testing.T) {
	blocks := linearConfig(blockLinear, 128, 128, false)
	blocks.CallerCastsDY = true
	if _, err := PlanLinear(blocks, 128, Tiles128); !errors.Is(err, ErrLayout) {
		t.Errorf("CallerCastsDY with 1x128 blocks: %v, want ErrLayout", err)
	}
	c := linearConfig(perTensorLinear, 128, 256, false)
	c.CallerCastsDY = true
	l := &Linear{c: c, ready: true}
	w := Operand{Rows: 256, Cols: 128}
	cast := func(_, _ Operand, _ cuda.DevicePtr) error { return nil }
	if _, _, err := l.Backward(Output{}, Output{}, 0, w); !errors.Is(err, ErrLayout) {
		t.Errorf("Backward of a CallerCastsDY layer: %v, want ErrLayout", err)
	}
	if _, _, err := l.BackwardAmax(Output{}, Output{}, 0, 4, w); !errors.Is(err, ErrLayout) {
		t.Errorf("BackwardAmax of a CallerCastsDY layer: %v, want ErrLayout", err)
	}
	if _, _, err := l.BackwardCast(Output{}, Output{}, 0, 0, w, nil); err == nil {
		t.Errorf("BackwardCast with a nil cast: no error")
	}
	plain := &Linear{c: linearConfig(perTensorLinear, 128, 256, false), ready: true}
	if _, _, err := plain.BackwardCast(Output{}, Output{}, 0, 0, w, cast); !errors.Is(err, ErrLayout) {
		t.Errorf("BackwardCast without CallerCastsDY: %v, want ErrLayout", err)
	}
	for _, sh := range [][3]int{{1024, 768, 3072}, {1024, 3072, 768}, {8192, 2048, 8192}} {
		T, in, out := sh[0], sh[1], sh[2]
		p := linearConfig(perTensorLinear, in, out, false)
		a, err1 := PlanLinear(p, T, PerTensor)
		p.CallerCastsDY = true
		b, err2 := PlanLinear(p, T, PerTensor)
		if err := errors.Join(err1, err2); err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("%d tokens %d -> %d", T, in, out)
		if b.Kept != a.Kept || b.Transient != a.Transient+T*out {
			t.Errorf("%s: CallerCastsDY plans %+v, the plain layer %+v: want the same Kept and Transient + %d", name, b, a, T*out)
		}
		wgrad := Scratch(WGradProduct, Operand{Rows: T, Cols: out, Format: p.DY.Format, Scales: PerTensor}, Operand{Rows: T, Cols: in, Format: p.X.Format, Scales: PerTensor})
		if b.Products > a.Products || (a.Products == wgrad && b.Products == a.Products) || b.Products < wgrad-T*out {
			t.Errorf("%s: products' scratch %d with CallerCastsDY, %d without (the weight gradient's %d): the transposed dy did not leave it", name, b.Products, a.Products, wgrad)
		}
	}
}

// TestLinearBackwardCast runs a per-tensor layer through Backward and a
// CallerCastsDY layer of the same shape through BackwardCast, whose cast
// is gemm's own kernels (quant_cast at the given scale, then the FP8
// transpose): dx and dw must be the same bits, without a key and with the
// key of the exact amax, for float32 and bfloat16 output gradients; and
// the scale handed to the cast must be the one whose inverse BackwardCast
// wrote (the codes the cast made then decode to dy's quantization).
func TestLinearBackwardCast(t *testing.T) {
	e := newEngine(t)
	const T, in, out = 256, 128, 192
	c := linearCase{"per-tensor", perTensorLinear, e4Current}
	w := weight(t, randMatrix(out, in, 7), out, in, c.w).upload(t, e)
	xv := randMatrix(T, in, 8)
	for _, gt := range []buffer.DType{buffer.Float32, buffer.BFloat16} {
		t.Run(fmt.Sprint(gt), func(t *testing.T) {
			dyv := randMatrix(T, out, 9)
			if gt == buffer.BFloat16 {
				dyv = bf16Values(dyv)
			}
			_, hdy, _, _ := linearRefs(t, c, xv, dyv, T, in, out)
			el, err := elem(gt)
			must(t, err)
			size := gt.Size()
			x, dy := devAlloc(t, e.d, 4*T*in), devAlloc(t, e.d, size*T*out)
			must(t, e.s.Upload(x, encode(xv, buffer.Float32)))
			must(t, e.s.Upload(dy, encode(dyv, gt)))
			y, dx, dw, amax := devAlloc(t, e.d, 2*T*out), devAlloc(t, e.d, 2*T*in), devAlloc(t, e.d, 4*out*in), devAlloc(t, e.d, 4)
			var casts int
			cast := func(q, qT Operand, scale cuda.DevicePtr) error {
				casts++
				if q.Transposed || !qT.Transposed || q.ScaleInv != qT.ScaleInv || q.Rows != T || q.Cols != out {
					return fmt.Errorf("cast given %v and %v", q, qT)
				}
				if err := e.k.QuantCast(e.s, icuda.DevicePtr(q.Data), dy, T*out, el, q.Format, icuda.DevicePtr(scale), 0); err != nil {
					return err
				}
				return e.k.TransposeFP8(e.s, icuda.DevicePtr(qT.Data), icuda.DevicePtr(q.Data), T, out)
			}
			// run queues Forward and Backward of a layer (BackwardCast when
			// caller) and returns dx, dw and the row-major quantized dy.
			run := func(caller bool, key uint32) (dxb, dwb []byte, q hostOperand) {
				cfg := linearConfig(c.base, in, out, false)
				cfg.Input, cfg.GradInput, cfg.CallerCastsDY = buffer.Float32, gt, caller
				l, err := e.NewLinear(cfg)
				must(t, err)
				defer l.Release()
				_, err = l.Forward(BF16(cuda.DevicePtr(y)), cuda.DevicePtr(x), T, w)
				must(t, err)
				a := cuda.DevicePtr(0)
				if key != 0 {
					must(t, e.s.Upload(amax, icuda.Bytes([]uint32{key})))
					a = cuda.DevicePtr(amax)
				}
				dxo, dwo := BF16(cuda.DevicePtr(dx)), Output{Data: cuda.DevicePtr(dw), Type: buffer.Float32}
				if caller {
					_, _, err = l.BackwardCast(dxo, dwo, cuda.DevicePtr(dy), a, w, cast)
				} else {
					_, _, err = l.BackwardAmax(dxo, dwo, cuda.DevicePtr(dy), a, w)
				}
				must(t, err)
				dxb, dwb = make([]byte, 2*T*in), make([]byte, 4*out*in)
				must(t, e.s.Download(dxb, dx))
				must(t, e.s.Download(dwb, dw))
				return dxb, dwb, download(t, e, cfg.backwardScratch(&arena{base: e.act}, T).dy)
			}
			m := float32(0)
			for _, v := range dyv {
				m = max(m, float32(math.Abs(float64(v))))
			}
			for _, key := range []uint32{0, math.Float32bits(m)} {
				dx0, dw0, _ := run(false, key)
				dx1, dw1, q1 := run(true, key)
				sameOperand(t, fmt.Sprintf("key %#x: BackwardCast's dy", key), q1, hdy)
				if !bytes.Equal(dx0, dx1) || !bytes.Equal(dw0, dw1) {
					t.Errorf("key %#x: BackwardCast's dx or dw differ from Backward's", key)
				}
			}
			if casts != 2 {
				t.Errorf("cast called %d times, want 2", casts)
			}
		})
	}
}
