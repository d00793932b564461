package gemm

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/fp8"
	icuda "github.com/distopt/distopt/internal/cuda"
)

// recipeCase is one way of quantizing a linear layer: the weight's recipe
// (as the optimizer gathers it), the input's and the output gradient's.
type recipeCase struct {
	name      string
	w, x, dy  fp8.Recipe
	path      Path
	hostActs  bool // activations quantized on the CPU (layouts Quantize does not make)
	actLayout Layout
}

var (
	e4Current = fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}
	e5Current = fp8.Recipe{Format: fp8.E5M2, Scaling: fp8.TensorCurrent}
	e4Delayed = fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorDelayed, HistoryLen: 4}
	e5Delayed = fp8.Recipe{Format: fp8.E5M2, Scaling: fp8.TensorDelayed, HistoryLen: 4}
	e4Tiles   = fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.Block128x128}
	e4Blocks  = fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.Block1x128}
	e5Blocks  = fp8.Recipe{Format: fp8.E5M2, Scaling: fp8.Block1x128}
	e4MX      = fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.MXFP8}
	e5MX      = fp8.Recipe{Format: fp8.E5M2, Scaling: fp8.MXFP8}
)

var recipeCases = []recipeCase{
	{"current", e4Current, e4Current, e5Current, TensorCores, false, PerTensor},
	{"delayed", e4Delayed, e4Delayed, e5Delayed, TensorCores, false, PerTensor},
	{"tiles128-rows128", e4Tiles, e4Blocks, e5Blocks, TensorCores, false, Rows128},
	{"fallback-1x128-weights", e4Blocks, e4Blocks, e5Blocks, FallbackDequantBF16, false, Rows128},
	{"fallback-mxfp8", e4MX, e4MX, e5MX, FallbackDequantBF16, true, MX32},
}

// shapes are (tokens, in, out): multiples of 128; multiples of 16 only
// (partial 1x128 blocks and 128x128 tiles); and 3 K-blocks of 128 (a tile
// grid whose rows cuBLASLt reads padded to 4).
var shapes = [][3]int{{256, 512, 384}, {48, 144, 80}, {128, 384, 256}}

// activation quantizes the rows x cols matrix v for case c with recipe r,
// stored transposed when transposed is set, and returns the device operand
// with the host copy the reference decodes.
func activation(t *testing.T, e *Engine, c recipeCase, r fp8.Recipe, v []float32, rows, cols int, transposed bool) (Operand, hostOperand) {
	t.Helper()
	if c.hostActs {
		src := v
		if transposed {
			src = transposeF32(v, rows, cols)
		}
		sr, sc := rows, cols
		if transposed {
			sr, sc = cols, rows
		}
		h := weight(t, src, sr, sc, r)
		h.o.Rows, h.o.Cols, h.o.Transposed = rows, cols, transposed
		return h.upload(t, e), h
	}
	o, err := AllocOperand(e.device(), rows, cols, r.Format, c.actLayout, transposed)
	must(t, err)
	t.Cleanup(func() { FreeOperand(e.device(), o) })
	src := devAlloc(t, e.d, 4*len(v))
	must(t, e.s.Upload(src, icuda.Bytes(v)))
	scale := float32(0)
	if r.Scaling == fp8.TensorDelayed {
		scale, _ = fp8.ScaleFromAmax(fp8.Amax(v)*1.25, r.Format, 0, false)
	}
	must(t, e.Quantize(o, cuda.DevicePtr(src), buffer.Float32, r, scale, 0))
	return o, download(t, e, o)
}

func transposeF32(v []float32, rows, cols int) []float32 {
	out := make([]float32, len(v))
	for i := range rows {
		for j := range cols {
			out[j*rows+i] = v[i*cols+j]
		}
	}
	return out
}

// TestProducts runs the three products of a linear layer for every recipe
// and shape and compares each output element with a float64 reference
// computed from the decoded FP8 operands (code times scale_inv; for the
// fallback, those values rounded to bfloat16, which is what it multiplies).
//
// Tolerance, per element: |got - ref| <= 2^-8 |ref| + 2^-10 sum_k |a_k b_k|,
// plus 2^-8 |product| for an accumulated bfloat16 gradient. The products
// of two FP8 values are exact in float32; their accumulation is not: Hopper's
// FP8 tensor cores add inside one MMA with fewer bits than FP32 (about 14,
// as DeepSeek-V3's report measured) before cuBLASLt promotes the partial
// sums into FP32. The first GPU run (2026-12-01) saw errors up to 2^-11.4
// of sum |a b| on these shapes; the second term allows 2^-10. The rounding
// of the output to bfloat16 is 2^-9 |ref|, the first term with a factor 2
// of margin. Accumulating into bfloat16 (beta = 1) was seen to round twice,
// the product to bfloat16 before the sum, hence the third term.
func TestProducts(t *testing.T) {
	e := newEngine(t)
	for _, c := range recipeCases {
		for _, sh := range shapes {
			t.Run(fmt.Sprintf("%s/T=%d,in=%d,out=%d", c.name, sh[0], sh[1], sh[2]), func(t *testing.T) {
				checkLayer(t, e, c, sh[0], sh[1], sh[2])
			})
		}
	}
	t.Logf("%s; peak scratch %d bytes", e.Library(), e.PeakScratch())
}

// TestAutotune runs the products with plans tuned over 8 candidates (the
// tuning runs write the output several times) and checks them as
// TestProducts does.
func TestAutotune(t *testing.T) {
	e := newEngine(t)
	e.SetAutotune(8)
	for _, c := range recipeCases[:3] {
		t.Run(c.name, func(t *testing.T) { checkLayer(t, e, c, 256, 512, 384) })
	}
}

func checkLayer(t *testing.T, e *Engine, c recipeCase, T, in, out int) {
	seed := uint64(T*7 + in*3 + out)
	hw := weight(t, randMatrix(out, in, seed), out, in, c.w)
	w := hw.upload(t, e)
	xv, dyv := randMatrix(T, in, seed+1), randMatrix(T, out, seed+2)
	x, hx := activation(t, e, c, c.x, xv, T, in, false)
	dy, hdy := activation(t, e, c, c.dy, dyv, T, out, false)
	bf := c.path == FallbackDequantBF16
	W, X, DY := hw.decode(bf), hx.decode(bf), hdy.decode(bf)

	y := devAlloc(t, e.d, 2*T*out)
	res, err := e.Forward(BF16(cuda.DevicePtr(y)), x, w)
	must(t, err)
	checkPath(t, "forward", res, c.path)
	ref, mag := reference(T, out, in, func(p, k int) float64 { return X[p*in+k] }, func(q, k int) float64 { return W[q*in+k] })
	compare(t, "forward", readBF16(t, e, y, T*out), ref, mag, nil, false)

	dx := devAlloc(t, e.d, 2*T*in)
	res, err = e.DGrad(BF16(cuda.DevicePtr(dx)), dy, w)
	must(t, err)
	checkPath(t, "dgrad", res, c.path)
	ref, mag = reference(T, in, out, func(p, k int) float64 { return DY[p*out+k] }, func(q, k int) float64 { return W[k*in+q] })
	compare(t, "dgrad", readBF16(t, e, dx, T*in), ref, mag, nil, false)

	// The weight gradient reads T-contiguous inputs: 1x128 activations are
	// quantized again down their columns; the others are transposed
	// inside WGrad (exact), and the fallback reads them as stored.
	// The weight gradient does not read the weight: it runs on the tensor
	// cores whenever the activations' layout allows.
	wantW := FallbackDequantBF16
	if c.actLayout.TensorCores() {
		wantW = TensorCores
	}
	if c.actLayout == Rows128 {
		x, hx = activation(t, e, c, c.x, xv, T, in, true)
		dy, hdy = activation(t, e, c, c.dy, dyv, T, out, true)
	}
	X, DY = hx.decode(wantW == FallbackDequantBF16), hdy.decode(wantW == FallbackDequantBF16)
	ref, mag = reference(out, in, T, func(p, k int) float64 { return DY[k*out+p] }, func(q, k int) float64 { return X[k*in+q] })
	for _, gt := range []buffer.DType{buffer.Float32, buffer.BFloat16} {
		prior := randMatrix(out, in, seed+3)
		dw := devAlloc(t, e.d, gt.Size()*out*in)
		must(t, e.s.Upload(dw, encode(prior, gt)))
		res, err = e.WGrad(Output{Data: cuda.DevicePtr(dw), Type: gt, Accumulate: true}, dy, x)
		must(t, err)
		checkPath(t, "wgrad", res, wantW)
		raw := make([]byte, gt.Size()*out*in)
		must(t, e.s.Download(raw, dw))
		compare(t, "wgrad "+gt.String(), decodeOut(raw, gt), ref, mag, priorOf(prior, gt), gt == buffer.BFloat16)
	}
}

func checkPath(t *testing.T, what string, r Result, want Path) {
	t.Helper()
	if r.Path != want {
		t.Errorf("%s ran on %v, want %v", what, r.Path, want)
	}
}

// reference returns out[p][q] = sum_k l(p,k) r(q,k) and sum_k |l r|.
func reference(P, Q, K int, l, r func(i, k int) float64) (ref, mag []float64) {
	ref, mag = make([]float64, P*Q), make([]float64, P*Q)
	for p := range P {
		for q := range Q {
			var s, m float64
			for k := range K {
				v := l(p, k) * r(q, k)
				s += v
				m += math.Abs(v)
			}
			ref[p*Q+q], mag[p*Q+q] = s, m
		}
	}
	return ref, mag
}

// compare checks got against ref (+ prior, the accumulated gradient) with
// the tolerance of TestProducts.
func compare(t *testing.T, what string, got []float32, ref, mag, prior []float64, twice bool) {
	t.Helper()
	bad := 0
	for i, g := range got {
		want := ref[i]
		if prior != nil {
			want += prior[i]
		}
		tol := math.Ldexp(math.Abs(want), -8) + math.Ldexp(mag[i], -10)
		if twice {
			tol += math.Ldexp(math.Abs(ref[i]), -8)
		}
		if d := math.Abs(float64(g) - want); !(d <= tol) {
			bad++
			if bad <= 3 {
				t.Errorf("%s: element %d = %v, want %v (tolerance %.3g)", what, i, g, want, tol)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d elements out of tolerance", what, bad, len(got))
	}
}

func readBF16(t *testing.T, e *Engine, p icuda.DevicePtr, n int) []float32 {
	t.Helper()
	raw := make([]byte, 2*n)
	must(t, e.s.Download(raw, p))
	return decodeOut(raw, buffer.BFloat16)
}

func encode(v []float32, dt buffer.DType) []byte {
	if dt == buffer.Float32 {
		return icuda.Bytes(v)
	}
	h := make([]uint16, len(v))
	for i, x := range v {
		h[i] = fp8.BF16FromFloat32(x)
	}
	return icuda.Bytes(h)
}

func decodeOut(raw []byte, dt buffer.DType) []float32 {
	if dt == buffer.Float32 {
		return append([]float32(nil), icuda.View[float32](raw)...)
	}
	h := icuda.View[uint16](raw)
	out := make([]float32, len(h))
	for i, x := range h {
		out[i] = fp8.Float32FromBF16(x)
	}
	return out
}

// priorOf returns the values a gradient buffer held before accumulation.
func priorOf(v []float32, dt buffer.DType) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		if dt == buffer.BFloat16 {
			x = fp8.RoundBF16(x)
		}
		out[i] = float64(x)
	}
	return out
}

// TestTransposeOperand checks Engine.Transpose against the CPU for
// per-tensor and tile-scaled operands (bytes and scales, bit for bit), and
// that a weight gradient from the kept transposes equals, bit for bit, the
// one WGrad makes with its own transient transposes.
func TestTransposeOperand(t *testing.T) {
	e := newEngine(t)
	for _, r := range []fp8.Recipe{e4Current, e4Tiles} {
		rows, cols := 272, 400
		h := weight(t, randMatrix(rows, cols, 5), rows, cols, r)
		src := h.upload(t, e)
		dst, err := AllocOperand(e.device(), rows, cols, r.Format, h.o.Scales, true)
		must(t, err)
		t.Cleanup(func() { FreeOperand(e.device(), dst) })
		must(t, e.Transpose(dst, src))
		got := download(t, e, dst)
		if a, b := got.decode(false), h.decode(false); !equalF64(a, b) {
			t.Errorf("%v: the transposed operand holds other values", r)
		}
	}
	hx := weight(t, randMatrix(64, 96, 6), 64, 96, e4Current)
	hdy := weight(t, randMatrix(64, 80, 7), 64, 80, e5Current)
	x, dy := hx.upload(t, e), hdy.upload(t, e)
	xt, _ := AllocOperand(e.device(), 64, 96, fp8.E4M3, PerTensor, true)
	dyt, _ := AllocOperand(e.device(), 64, 80, fp8.E5M2, PerTensor, true)
	t.Cleanup(func() { FreeOperand(e.device(), xt); FreeOperand(e.device(), dyt) })
	must(t, e.Transpose(xt, x))
	must(t, e.Transpose(dyt, dy))
	a, b := devAlloc(t, e.d, 4*80*96), devAlloc(t, e.d, 4*80*96)
	_, err := e.WGrad(Output{Data: cuda.DevicePtr(a), Type: buffer.Float32}, dy, x)
	must(t, err)
	_, err = e.WGrad(Output{Data: cuda.DevicePtr(b), Type: buffer.Float32}, dyt, xt)
	must(t, err)
	ga, gb := make([]byte, 4*80*96), make([]byte, 4*80*96)
	must(t, e.s.Download(ga, a))
	must(t, e.s.Download(gb, b))
	if string(ga) != string(gb) {
		t.Error("weight gradients from transient and kept transposes differ")
	}
}

func equalF64(a, b []float64) bool {
	for i := range a {
		if math.Float64bits(a[i]) != math.Float64bits(b[i]) {
			return false
		}
	}
	return len(a) == len(b)
}

// TestRefusals checks the clear errors of shapes and layouts the FP8
// kernels cannot take.
func TestRefusals(t *testing.T) {
	e := newEngine(t)
	op := func(rows, cols int, r fp8.Recipe) Operand {
		return weight(t, randMatrix(rows, cols, 9), rows, cols, r).upload(t, e)
	}
	y := devAlloc(t, e.d, 2*256*256)
	cases := []struct {
		name string
		run  func() error
		want error
	}{
		{"K not a multiple of 16", func() error {
			_, err := e.Forward(BF16(cuda.DevicePtr(y)), op(32, 100, e4Current), op(32, 100, e4Current))
			return err
		}, ErrShape},
		{"inner dimensions differ", func() error {
			_, err := e.Forward(BF16(cuda.DevicePtr(y)), op(32, 64, e4Current), op(32, 48, e4Current))
			return err
		}, ErrShape},
		{"tiles on both sides", func() error {
			_, err := e.Forward(BF16(cuda.DevicePtr(y)), op(128, 128, e4Tiles), op(128, 128, e4Tiles))
			return err
		}, ErrLayout},
		{"per tensor with tiles", func() error {
			_, err := e.Forward(BF16(cuda.DevicePtr(y)), op(128, 128, e4Current), op(128, 128, e4Tiles))
			return err
		}, ErrLayout},
		{"E5M2 on both sides", func() error {
			_, err := e.Forward(BF16(cuda.DevicePtr(y)), op(32, 64, e5Current), op(32, 64, e5Current))
			return err
		}, ErrLayout},
		{"1x128 rows in the weight gradient", func() error {
			o, err := AllocOperand(e.device(), 32, 128, fp8.E4M3, Rows128, false)
			must(t, err)
			defer FreeOperand(e.device(), o)
			_, err = e.WGrad(Output{Data: cuda.DevicePtr(y), Type: buffer.Float32}, o, o)
			return err
		}, ErrLayout},
	}
	for _, c := range cases {
		if err := c.run(); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want an error matching %v", c.name, err, c.want)
		} else {
			t.Logf("%s: %v", c.name, err)
		}
	}
}

// TestMisalignedScales gives the weight's scale_inv at a 4-byte offset, as
// the optimizer's per-tensor scale array hands most weights theirs (and a
// tile grid likewise): the engine must copy the scales to an aligned
// address (cuBLASLt refuses misaligned scale pointers) and still compute
// the right products, with the scratch the planner predicts.
func TestMisalignedScales(t *testing.T) {
	e := newEngine(t)
	for _, c := range recipeCases[:3] {
		t.Run(c.name, func(t *testing.T) {
			const T, in, out = 128, 256, 384
			hw := weight(t, randMatrix(out, in, 21), out, in, c.w)
			w := hw.upload(t, e)
			w.ScaleInv = cuda.DevicePtr(devAlloc(t, e.d, len(hw.scales)+16).Add(4))
			must(t, e.s.Upload(icuda.DevicePtr(w.ScaleInv), hw.scales))
			x, hx := activation(t, e, c, c.x, randMatrix(T, in, 22), T, in, false)
			dy, hdy := activation(t, e, c, c.dy, randMatrix(T, out, 23), T, out, false)
			W, X, DY := hw.decode(false), hx.decode(false), hdy.decode(false)
			y := devAlloc(t, e.d, 2*T*out)
			res, err := e.Forward(BF16(cuda.DevicePtr(y)), x, w)
			must(t, err)
			if want := Scratch(ForwardProduct, x, w); res.Scratch != want || want == 0 {
				t.Errorf("forward used %d bytes of scratch, the planner says %d (a scale copy is not 0)", res.Scratch, want)
			}
			ref, mag := reference(T, out, in, func(p, k int) float64 { return X[p*in+k] }, func(q, k int) float64 { return W[q*in+k] })
			compare(t, "forward", readBF16(t, e, y, T*out), ref, mag, nil, false)
			dx := devAlloc(t, e.d, 2*T*in)
			res, err = e.DGrad(BF16(cuda.DevicePtr(dx)), dy, w)
			must(t, err)
			if want := Scratch(DGradProduct, dy, w); res.Scratch != want {
				t.Errorf("dgrad used %d bytes of scratch, the planner says %d", res.Scratch, want)
			}
			ref, mag = reference(T, in, out, func(p, k int) float64 { return DY[p*out+k] }, func(q, k int) float64 { return W[k*in+q] })
			compare(t, "dgrad", readBF16(t, e, dx, T*in), ref, mag, nil, false)
		})
	}
}
