package gemm

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/fp8"
	icuda "github.com/distopt/distopt/internal/cuda"
)

// linearCase is a recipe of a Linear with the weight recipe it pairs with.
type linearCase struct {
	name string
	base LinearConfig
	w    fp8.Recipe
}

var linearCases = []linearCase{{"per-tensor", perTensorLinear, e4Current}, {"blocks", blockLinear, e4Tiles},
	{"blocks-pow2", LinearConfig{X: pow2(e4Blocks), DY: pow2(e5Blocks)}, e4Tiles}}

func pow2(r fp8.Recipe) fp8.Recipe {
	r.PowerOf2 = true
	return r
}

// linearRun is what one Forward and Backward of a Linear produced.
type linearRun struct {
	y, dx, dw []byte
	x, xT     hostOperand // the kept input and the transposed input WGrad read
}

// linearMode is how a run keeps its input: transient transposes, kept
// transposes, or nothing (Recompute and Restore); or kept transposes of
// an input quantized on the CPU and handed over by ForwardQuantized.
type linearMode int

const (
	transientMode linearMode = iota
	keepMode
	recomputeMode
	quantizedMode
)

// runLinear runs Forward and Backward of a layer of case c on x and dy of
// type in (given as their float32 values, which must be representable)
// and a float32 gradient that starts at prior, and reads back the
// outputs, the input the layer kept or re-made and the transposed input
// the weight gradient read (kept, or transient in the engine's buffers).
func runLinear(t *testing.T, e *Engine, c linearCase, mode linearMode, in buffer.DType, w Operand, xv, dyv, prior []float32, T, cin, out int) linearRun {
	t.Helper()
	cfg := linearConfig(c.base, cin, out, mode == keepMode || mode == quantizedMode)
	cfg.Input, cfg.Recompute = in, mode == recomputeMode
	l, err := e.NewLinear(cfg)
	must(t, err)
	t.Cleanup(func() { l.Release() })
	size := map[buffer.DType]int{buffer.BFloat16: 2, buffer.Float32: 4}[in]
	x, dy := devAlloc(t, e.d, size*T*cin), devAlloc(t, e.d, size*T*out)
	must(t, e.s.Upload(x, encode(xv, in)))
	must(t, e.s.Upload(dy, encode(dyv, in)))
	y, dx, dw := devAlloc(t, e.d, 2*T*out), devAlloc(t, e.d, 2*T*cin), devAlloc(t, e.d, 4*out*cin)
	must(t, e.s.Upload(dw, icuda.Bytes(prior)))
	if mode == quantizedMode {
		hx, _, _, _ := linearRefs(t, c, xv, dyv, T, cin, out)
		_, err = l.ForwardQuantized(BF16(cuda.DevicePtr(y)), T, w, func(xq Operand) error {
			if err := e.s.Upload(icuda.DevicePtr(xq.Data), hx.codes); err != nil {
				return err
			}
			return e.s.Upload(icuda.DevicePtr(xq.ScaleInv), hx.scales)
		})
	} else {
		_, err = l.Forward(BF16(cuda.DevicePtr(y)), cuda.DevicePtr(x), T, w)
	}
	must(t, err)
	if got, want := l.KeptBytes(), map[linearMode]int{transientMode: 1, keepMode: 2, quantizedMode: 2}[mode]*T*cin; got < want || (want == 0 && got != 0) {
		t.Fatalf("kept %d bytes, want at least %d", got, want)
	}
	if mode == recomputeMode {
		must(t, e.s.Memset32(e.act, 0xffffffff, e.actSize/4)) // Forward's quantized input is gone
		must(t, l.Restore(cuda.DevicePtr(x)))
	}
	_, wres, err := l.Backward(BF16(cuda.DevicePtr(dx)), Output{Data: cuda.DevicePtr(dw), Type: buffer.Float32, Accumulate: true}, cuda.DevicePtr(dy), w)
	must(t, err)
	if wres.Path != TensorCores {
		t.Errorf("wgrad ran on %v", wres.Path)
	}
	r := linearRun{y: make([]byte, 2*T*out), dx: make([]byte, 2*T*cin), dw: make([]byte, 4*out*cin)}
	must(t, e.s.Download(r.y, y))
	must(t, e.s.Download(r.dx, dx))
	must(t, e.s.Download(r.dw, dw))
	bs := cfg.backwardScratch(&arena{base: e.act}, T)
	xk := l.x
	if mode == recomputeMode {
		xk = bs.x
	}
	r.x = download(t, e, xk)
	switch {
	case mode == keepMode || mode == quantizedMode:
		r.xT = download(t, e, l.xT)
	case l.c.layout() == Rows128: // re-made in the engine's activation buffer
		r.xT = download(t, e, bs.xT)
	default: // transposed inside WGrad, after the output gradient's transpose
		dyQ := bs.dy
		xT := xk
		xT.Transposed, xT.Data = true, cuda.DevicePtr(e.scratch.Add(sideNeed(dyQ, false)))
		r.xT = download(t, e, xT)
	}
	return r
}

// TestLinear runs a layer's Forward and Backward for both recipes and
// both input types (bfloat16; float32 values that bfloat16 cannot hold),
// with transient and kept transposes and with Recompute, and checks:
//   - the kept (or re-made) input is, bit for bit, the CPU quantization of
//     x (per tensor, or 1x128 blocks along rows);
//   - the transposed input the weight gradient read is, bit for bit, the
//     CPU transpose of the kept input (per tensor), or its CPU
//     re-quantization down the columns (1x128 blocks);
//   - y, dx and dw against float64 references from the decoded FP8
//     operands (CPU quantizations of x and dy, the weight as gathered),
//     within TestProducts' tolerance;
//   - transient and kept transposes, Recompute, and ForwardQuantized
//     handed the CPU quantization of x (kept transposes: made from what
//     fill wrote) give identical bits of y, dx and dw.
func TestLinear(t *testing.T) {
	e := newEngine(t)
	for _, c := range linearCases {
		for _, s := range shapes {
			for _, in := range []buffer.DType{buffer.BFloat16, buffer.Float32} {
				T, cin, out := s[0], s[1], s[2]
				t.Run(fmt.Sprintf("%s/%v/%dx%dx%d", c.name, in, T, cin, out), func(t *testing.T) {
					testLinear(t, e, c, in, T, cin, out)
				})
			}
		}
	}
}

func testLinear(t *testing.T, e *Engine, c linearCase, in buffer.DType, T, cin, out int) {
	seed := uint64(T*5 + cin*3 + out)
	hw := weight(t, randMatrix(out, cin, seed), out, cin, c.w)
	w := hw.upload(t, e)
	xv, dyv := randMatrix(T, cin, seed+1), randMatrix(T, out, seed+2)
	if in == buffer.BFloat16 {
		xv, dyv = bf16Values(xv), bf16Values(dyv)
	}
	prior := randMatrix(out, cin, seed+3)
	hx, hdy, hxT, hdyT := linearRefs(t, c, xv, dyv, T, cin, out)

	transient := runLinear(t, e, c, transientMode, in, w, xv, dyv, prior, T, cin, out)
	kept := runLinear(t, e, c, keepMode, in, w, xv, dyv, prior, T, cin, out)
	recomputed := runLinear(t, e, c, recomputeMode, in, w, xv, dyv, prior, T, cin, out)
	quantized := runLinear(t, e, c, quantizedMode, in, w, xv, dyv, prior, T, cin, out)
	runs := []struct {
		name string
		run  linearRun
	}{{"transient", transient}, {"kept", kept}, {"recompute", recomputed}, {"quantized", quantized}}
	for _, r := range runs {
		sameOperand(t, r.name+" kept x", r.run.x, hx)
		sameOperand(t, r.name+" transposed x", r.run.xT, hxT)
	}
	for _, r := range runs[1:] {
		for _, o := range []struct {
			name string
			a, b []byte
		}{{"y", transient.y, r.run.y}, {"dx", transient.dx, r.run.dx}, {"dw", transient.dw, r.run.dw}} {
			if !bytes.Equal(o.a, o.b) {
				t.Errorf("%s: transient transposes and %s give different bits", o.name, r.name)
			}
		}
	}
	W, X, DY := hw.decode(false), hx.decode(false), hdy.decode(false)
	ref, mag := reference(T, out, cin, func(p, k int) float64 { return X[p*cin+k] }, func(q, k int) float64 { return W[q*cin+k] })
	compare(t, "y", decodeOut(transient.y, buffer.BFloat16), ref, mag, nil, false)
	ref, mag = reference(T, cin, out, func(p, k int) float64 { return DY[p*out+k] }, func(q, k int) float64 { return W[k*cin+q] })
	compare(t, "dx", decodeOut(transient.dx, buffer.BFloat16), ref, mag, nil, false)
	XT, DYT := hxT.decode(false), hdyT.decode(false)
	ref, mag = reference(out, cin, T, func(p, k int) float64 { return DYT[k*out+p] }, func(q, k int) float64 { return XT[k*cin+q] })
	compare(t, "dw", decodeOut(transient.dw, buffer.Float32), ref, mag, priorOf(prior, buffer.Float32), false)
}

// linearRefs returns the CPU quantizations a layer of case c makes: the
// kept x, dy as DGrad reads it, and the transposed x and dy WGrad reads.
func linearRefs(t *testing.T, c linearCase, xv, dyv []float32, T, in, out int) (hx, hdy, hxT, hdyT hostOperand) {
	if c.base.layout() == Rows128 {
		hx, hdy = rowsQuant(xv, T, in, c.base.X), rowsQuant(dyv, T, out, c.base.DY)
		return hx, hdy, requant(hx, c.base.X), colsQuant(dyv, T, out, c.base.DY)
	}
	hx, hdy = weight(t, xv, T, in, c.base.X), weight(t, dyv, T, out, c.base.DY)
	return hx, hdy, transposeHost(hx), transposeHost(hdy)
}

// transposeHost returns h stored transposed: its codes transposed, the
// same per-tensor scale.
func transposeHost(h hostOperand) hostOperand {
	rows, cols := h.o.stored()
	codes := make([]byte, len(h.codes))
	for i := range rows {
		for j := range cols {
			codes[j*rows+i] = h.codes[i*cols+j]
		}
	}
	h.o.Transposed = !h.o.Transposed
	return hostOperand{o: h.o, codes: codes, scales: h.scales}
}

// sameOperand checks that got holds exactly want's codes and scales.
func sameOperand(t *testing.T, what string, got, want hostOperand) {
	t.Helper()
	if got.o.Transposed != want.o.Transposed || got.o.Rows != want.o.Rows || got.o.Cols != want.o.Cols {
		t.Errorf("%s: operand %v, want %v", what, got.o, want.o)
		return
	}
	if !bytes.Equal(got.codes, want.codes) {
		t.Errorf("%s: codes differ from the CPU's", what)
	}
	if !bytes.Equal(got.scales, want.scales) {
		t.Errorf("%s: scales differ from the CPU's", what)
	}
}

// TestLinearTransposes checks the kept transposed input bit for bit
// against the CPU for every token count and input size the layer allows
// up to 2 blocks of 128 and a bit beyond (multiples of 16: partial 1x128
// blocks, partial 64x64 transpose tiles; inputs from 80, the smallest
// shared dimension TestProducts ran the block-scaled kernels with), for
// both recipes.
func TestLinearTransposes(t *testing.T) {
	e := newEngine(t)
	const out = 16
	for _, c := range linearCases {
		for T := 16; T <= 272; T += 16 {
			for _, in := range []int{80, 128, 144, 192, 256, 272} {
				hw := weight(t, randMatrix(out, in, 1), out, in, c.w)
				w := hw.upload(t, e)
				xv := bf16Values(randMatrix(T, in, uint64(T*in)))
				l, err := e.NewLinear(linearConfig(c.base, in, out, true))
				must(t, err)
				x, y := devAlloc(t, e.d, 2*T*in), devAlloc(t, e.d, 2*T*out)
				must(t, e.s.Upload(x, encode(xv, buffer.BFloat16)))
				_, err = l.Forward(BF16(cuda.DevicePtr(y)), cuda.DevicePtr(x), T, w)
				must(t, err)
				hx, _, hxT, _ := linearRefs(t, c, xv, randMatrix(T, out, 2), T, in, out)
				name := fmt.Sprintf("%s %dx%d", c.name, T, in)
				sameOperand(t, name+" x", download(t, e, l.x), hx)
				sameOperand(t, name+" xT", download(t, e, l.xT), hxT)
				must(t, l.Release())
			}
		}
	}
}

// TestLinearMemory checks the memory of two layers against PlanLinear's
// closed forms with the driver's own count (cuMemGetInfo): after both
// Forwards the device holds their kept bytes (each allocation rounded up
// to at most 2 MiB more; a bfloat16 or second FP8 copy would exceed it);
// the Backwards allocate nothing (the transients live in the engine's
// shared buffers, sized as PlanLinear says); Release gives the kept bytes
// back (up to the driver's rounding: less than one layer's stays).
func TestLinearMemory(t *testing.T) {
	const T, in, out = 4096, 2048, 1024
	for _, c := range linearCases {
		for _, keep := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/keep=%v", c.name, keep), func(t *testing.T) {
				e := newEngine(t)
				cfg := linearConfig(c.base, in, out, keep)
				w := weight(t, randMatrix(out, in, 3), out, in, c.w).upload(t, e)
				x, dy := devAlloc(t, e.d, 2*T*in), devAlloc(t, e.d, 2*T*out)
				must(t, e.s.Memset32(x, 0x3f803f80, T*in/2)) // 1.0 in bfloat16
				must(t, e.s.Memset32(dy, 0x3f003f00, T*out/2))
				y, dx, dw := devAlloc(t, e.d, 2*T*out), devAlloc(t, e.d, 2*T*in), devAlloc(t, e.d, 4*out*in)
				layers := make([]*Linear, 3)
				for i := range layers {
					var err error
					layers[i], err = e.NewLinear(cfg)
					must(t, err)
				}
				step := func(ls []*Linear) {
					for _, l := range ls {
						_, err := l.Forward(BF16(cuda.DevicePtr(y)), cuda.DevicePtr(x), T, w)
						must(t, err)
					}
					for _, l := range ls {
						_, _, err := l.Backward(BF16(cuda.DevicePtr(dx)), Output{Data: cuda.DevicePtr(dw), Type: buffer.Float32}, cuda.DevicePtr(dy), w)
						must(t, err)
					}
				}
				step(layers[:1]) // grows the engine's buffers
				must(t, layers[0].Release())
				m, err := PlanLinear(cfg, T, w.Scales)
				must(t, err)
				if got := e.ActivationScratch(); got != m.Transient {
					t.Errorf("activation buffer %d bytes, PlanLinear says %d", got, m.Transient)
				}
				if got := e.PeakScratch(); got > m.Products {
					t.Errorf("products' scratch %d bytes, PlanLinear's bound %d", got, m.Products)
				}
				free0 := memFree(t, e)
				for _, l := range layers[1:] {
					_, err := l.Forward(BF16(cuda.DevicePtr(y)), cuda.DevicePtr(x), T, w)
					must(t, err)
					if l.KeptBytes() != m.Kept {
						t.Errorf("layer keeps %d bytes, PlanLinear says %d", l.KeptBytes(), m.Kept)
					}
				}
				free1 := memFree(t, e)
				copies := map[bool]int{false: 1, true: 2}[keep]
				allocs := 2 * len(layers[1:]) * copies // codes and scales of each kept operand
				// The codes (8 MiB each) are whole 2 MiB pages; the scales may
				// come from pages the driver already holds, or take a new one.
				if used := int(free0 - free1); used < 2*copies*T*in || used > 2*m.Kept+allocs*(2<<20) {
					t.Errorf("two Forwards took %d bytes of device memory, want 2 x %d kept (+ rounding of %d allocations)", used, m.Kept, allocs)
				}
				for _, l := range layers[1:] {
					_, _, err := l.Backward(BF16(cuda.DevicePtr(dx)), Output{Data: cuda.DevicePtr(dw), Type: buffer.Float32}, cuda.DevicePtr(dy), w)
					must(t, err)
				}
				if free2 := memFree(t, e); free2 != free1 {
					t.Errorf("Backward changed free device memory by %d bytes, want 0 (transients in the engine's buffers)", int(free1)-int(free2))
				}
				for _, l := range layers[1:] {
					must(t, l.Release())
				}
				if left := int(free0) - int(memFree(t, e)); left >= m.Kept {
					t.Errorf("after Release %d bytes more in use than before the Forwards, a layer keeps %d", left, m.Kept)
				}
				t.Logf("kept %d bytes per layer (%.4fx BF16), activation buffer %d, products' scratch %d",
					m.Kept, float64(m.Kept)/float64(m.BF16), e.ActivationScratch(), e.PeakScratch())
			})
		}
	}
}

func memFree(t *testing.T, e *Engine) uint64 {
	t.Helper()
	must(t, e.s.Synchronize())
	free, _, err := e.d.MemInfo()
	must(t, err)
	return free
}

// TestLinearRefusals checks the errors of a wrong weight, a token count
// the weight gradient cannot take, and Backward without Forward.
func TestLinearRefusals(t *testing.T) {
	e := newEngine(t)
	l, err := e.NewLinear(linearConfig(perTensorLinear, 64, 32, false))
	must(t, err)
	w := weight(t, randMatrix(32, 64, 1), 32, 64, e4Current).upload(t, e)
	x, y := devAlloc(t, e.d, 2*64*64), devAlloc(t, e.d, 2*64*32)
	if _, _, err := l.Backward(BF16(cuda.DevicePtr(x)), BF16(cuda.DevicePtr(y)), cuda.DevicePtr(y), w); err == nil {
		t.Error("Backward before Forward: no error")
	}
	wrong := w
	wrong.Rows, wrong.Cols = 64, 32
	if _, err := l.Forward(BF16(cuda.DevicePtr(y)), cuda.DevicePtr(x), 64, wrong); err == nil {
		t.Error("Forward with a 64x32 weight for 64 -> 32: no error")
	}
	if _, err := l.Forward(BF16(cuda.DevicePtr(y)), cuda.DevicePtr(x), 40, w); err == nil {
		t.Error("Forward of 40 tokens: no error")
	}
}
