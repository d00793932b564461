package main

import (
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/distopt/distopt/buffer"
	pcuda "github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/gemm"
	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/cudalink"
)

type bench struct {
	d             *cuda.Device
	s             *cuda.Stream
	e             *gemm.Engine
	iters, warmup int
	pattern       cuda.DevicePtr // 1 MiB of finite FP8 codes
}

const patternBytes = 1 << 20

// fill writes finite random FP8 codes (no NaN, no Inf in either format) to
// n bytes at p, and scale_inv = 1 to the scales.
func (b *bench) fill(o gemm.Operand) error {
	if b.pattern == 0 {
		p, err := b.d.Alloc(patternBytes)
		if err != nil {
			return err
		}
		r := rand.New(rand.NewPCG(1, 2))
		host := make([]byte, patternBytes)
		for i := range host {
			host[i] = byte(r.IntN(0x78)) | byte(r.IntN(2))<<7 // below E5M2's Inf and E4M3's NaN
		}
		if err := b.s.Upload(p, host); err != nil {
			return err
		}
		b.pattern = p
	}
	rows, cols := o.Rows, o.Cols
	for off := 0; off < rows*cols; off += patternBytes {
		if err := b.s.CopyDtoD(cuda.DevicePtr(o.Data.Add(off)), b.pattern, min(patternBytes, rows*cols-off)); err != nil {
			return err
		}
	}
	sr, sc := rows, cols
	if o.Transposed {
		sr, sc = cols, rows
	}
	return b.s.Memset32(cuda.DevicePtr(o.ScaleInv), 0x3f800000, gemm.ScaleBytes(sr, sc, o.Scales)/4)
}

// operand allocates and fills an operand.
func (b *bench) operand(rows, cols int, f fp8.Format, l gemm.Layout, transposed bool) (gemm.Operand, error) {
	o, err := gemm.AllocOperand(cudalink.PublicDevice(b.d), rows, cols, f, l, transposed)
	if err != nil {
		return o, err
	}
	return o, b.fill(o)
}

// timeit runs fn warmup times, then iters times between two events, and
// returns milliseconds per run.
func (b *bench) timeit(fn func() error) (float64, error) {
	for range b.warmup {
		if err := fn(); err != nil {
			return 0, err
		}
	}
	start, err := b.d.NewEvent(true)
	if err != nil {
		return 0, err
	}
	defer start.Destroy()
	end, err := b.d.NewEvent(true)
	if err != nil {
		return 0, err
	}
	defer end.Destroy()
	if err := start.Record(b.s); err != nil {
		return 0, err
	}
	for range b.iters {
		if err := fn(); err != nil {
			return 0, err
		}
	}
	if err := end.Record(b.s); err != nil {
		return 0, err
	}
	if err := end.Synchronize(); err != nil {
		return 0, err
	}
	dt, err := cuda.Elapsed(start, end)
	return float64(dt.Nanoseconds()) / 1e6 / float64(b.iters), err
}

// operands are the buffers of one layer's products.
type operands struct {
	w, wT, x, dy, xT, dyT gemm.Operand
	y, dx, dw             cuda.DevicePtr
	free                  []func() error
}

func (o *operands) release() error {
	var errs []error
	for _, f := range o.free {
		errs = append(errs, f())
	}
	return errors.Join(errs...)
}

func (b *bench) alloc(sh shape, r recipe) (*operands, error) {
	o := &operands{}
	mk := func(dst *gemm.Operand, rows, cols int, f fp8.Format, l gemm.Layout, tr bool) error {
		v, err := b.operand(rows, cols, f, l, tr)
		if err != nil {
			return err
		}
		*dst = v
		o.free = append(o.free, func() error { return gemm.FreeOperand(cudalink.PublicDevice(b.d), v) })
		return nil
	}
	buf := func(dst *cuda.DevicePtr, n int) error {
		p, err := b.d.Alloc(n)
		if err != nil {
			return err
		}
		*dst = p
		o.free = append(o.free, func() error { return b.d.Free(p) })
		return b.s.Memset8(p, 0, n)
	}
	T, in, out := sh.tokens, sh.in, sh.out
	err := errors.Join(mk(&o.w, out, in, r.wFmt, r.weight, false), mk(&o.wT, out, in, r.wFmt, r.weight, true),
		mk(&o.x, T, in, r.xFmt, r.act, false),
		mk(&o.dy, T, out, r.dy, r.act, false), mk(&o.xT, T, in, r.xFmt, r.act, true),
		mk(&o.dyT, T, out, r.dy, r.act, true), buf(&o.y, 2*T*out), buf(&o.dx, 2*T*in), buf(&o.dw, 4*out*in))
	if err != nil {
		o.release()
		return nil, err
	}
	return o, nil
}

// layer times the products of one shape and recipe and prints a row each.
func (b *bench) layer(sh shape, r recipe) error {
	o, err := b.alloc(sh, r)
	if err != nil {
		return err
	}
	defer o.release()
	flops := 2 * float64(sh.tokens) * float64(sh.in) * float64(sh.out)
	// The first weight-gradient call of each kind overwrites (so that an
	// autotuning engine tunes it); later ones accumulate.
	acc := map[string]bool{}
	wgrad := func(kind string, dy, x gemm.Operand) (gemm.Result, error) {
		res, err := b.e.WGrad(gemm.Output{Data: pcuda.DevicePtr(o.dw), Type: buffer.Float32, Accumulate: acc[kind]}, dy, x)
		acc[kind] = true
		return res, err
	}
	prods := []struct {
		name string
		fn   func() (gemm.Result, error)
	}{
		{"forward", func() (gemm.Result, error) { return b.e.Forward(gemm.BF16(pcuda.DevicePtr(o.y)), o.x, o.w) }},
		{"dgrad (incl. W transpose)", func() (gemm.Result, error) { return b.e.DGrad(gemm.BF16(pcuda.DevicePtr(o.dx)), o.dy, o.w) }},
		{"wgrad", func() (gemm.Result, error) { return wgrad("T", o.dyT, o.xT) }},
	}
	if r.act == gemm.PerTensor {
		prods = append(prods, struct {
			name string
			fn   func() (gemm.Result, error)
		}{"wgrad+T (incl. dY, X transposes)", func() (gemm.Result, error) { return wgrad("rows", o.dy, o.x) }})
	}
	if err := b.transposeRow(sh, r, o); err != nil {
		return err
	}
	for _, p := range prods {
		var res gemm.Result
		ms, err := b.timeit(func() error {
			var err error
			res, err = p.fn()
			return err
		})
		if err != nil {
			fmt.Printf("| %s | %dx%d -> %d | %s | %s | error: %v | |\n", sh.name, sh.tokens, sh.in, sh.out, r.name, p.name, err)
			continue
		}
		fmt.Printf("| %s | %dx%d -> %d | %s | %s (%v) | %.3f | %.0f |\n", sh.name, sh.tokens, sh.in, sh.out, r.name, p.name, res.Path, ms, flops/ms/1e9)
	}
	return nil
}

// transposeRow times the exact transpose of the weight alone (bytes and
// scales), the part of the data gradient that is not the GEMM, and prints
// its bandwidth (bytes read + written).
func (b *bench) transposeRow(sh shape, r recipe, o *operands) error {
	ms, err := b.timeit(func() error { return b.e.Transpose(o.wT, o.w) })
	if err != nil {
		return err
	}
	fmt.Printf("| %s | %d x %d | %s | W transpose alone | %.4f | %.0f GB/s |\n", sh.name, sh.out, sh.in, r.name, ms, 2*float64(sh.out*sh.in)/ms/1e6)
	return nil
}
