package gemm

import (
	"errors"
	"math"
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/fp8"
)

// The linear layers of the 1.3B GPT (d_model 2048) at 16384 tokens.
var gptLinears = []struct {
	name    string
	in, out int
}{{"qkv", 2048, 6144}, {"proj", 2048, 2048}, {"fc1", 2048, 8192}, {"fc2", 8192, 2048}}

const gptTokens = 16384

var (
	perTensorLinear = LinearConfig{X: e4Current, DY: e5Current}
	blockLinear     = LinearConfig{X: e4Blocks, DY: e5Blocks}
)

func linearConfig(base LinearConfig, in, out int, keep bool) LinearConfig {
	base.In, base.Out, base.KeepTransposed = in, out, keep
	return base
}

// TestPlanLinear checks PlanLinear against closed forms written out here:
// kept = T*in bytes plus scales (4 bytes per tensor, 4 per 1x128 block),
// doubled with KeepTransposed; the transients and the products' scratch
// as the engine lays them out (pieces aligned to 256 bytes).
func TestPlanLinear(t *testing.T) {
	up := func(n int) int { return (n + 255) / 256 * 256 }
	for _, s := range [][3]int{{gptTokens, 2048, 8192}, {48, 144, 80}, {272, 400, 128}} {
		T, in, out := s[0], s[1], s[2]
		bT, bIn, bOut := (T+127)/128, (in+127)/128, (out+127)/128
		for _, keep := range []bool{false, true} {
			m, err := PlanLinear(linearConfig(perTensorLinear, in, out, keep), T, PerTensor)
			must(t, err)
			want := LinearMemory{Kept: T*in + 4, BF16: 2 * T * in, Transient: up(T*out) + 256,
				Products: max(up(T*out)+up(T*in), up(out*in)+256)} // WGrad transposes dy and x; DGrad w (+ its scale)
			if keep {
				want.Kept = 2 * (T*in + 4)
				want.Products = max(up(T*out), up(out*in)+256)
			}
			if m != want {
				t.Errorf("per tensor %v keep %v: %+v, want %+v", s, keep, m, want)
			}
			m, err = PlanLinear(linearConfig(blockLinear, in, out, keep), T, Tiles128)
			must(t, err)
			gridT := up(4 * ceilDiv(in, 128) * gridLD(out)) // DGrad's transposed tile grid of w
			want = LinearMemory{Kept: T*in + 4*T*bIn, BF16: 2 * T * in,
				Transient: up(T*in) + up(4*in*bT) + max(up(2*T*in), up(T*out)+up(4*T*bOut)+up(T*out)+up(4*out*bT)), // dy, dyT over x's bfloat16
				Products:  max(up(4*ceilDiv(out, 128)*gridLD(in)), up(out*in)+gridT)}
			if keep {
				want.Kept += T*in + 4*in*bT
				want.Transient = max(up(T*out)+up(4*T*bOut)+up(T*out)+up(4*out*bT), up(2*T*in))
			}
			if m != want {
				t.Errorf("blocks %v keep %v: %+v, want %+v", s, keep, m, want)
			}
		}
	}
}

// TestPlanLinearRecompute checks that Recompute keeps nothing and lays
// the re-quantized input (T*in bytes and its scales) in front of the
// transients of a transient-transpose layer, for both input types (which
// change no FP8 buffer).
func TestPlanLinearRecompute(t *testing.T) {
	up := func(n int) int { return (n + 255) / 256 * 256 }
	for _, s := range [][3]int{{gptTokens, 2048, 8192}, {48, 144, 80}} {
		T, in, out := s[0], s[1], s[2]
		for _, c := range []struct {
			name string
			base LinearConfig
			w    Layout
		}{{"per-tensor", perTensorLinear, PerTensor}, {"blocks", blockLinear, Tiles128}} {
			for _, typ := range []buffer.DType{buffer.BFloat16, buffer.Float32} {
				plain := linearConfig(c.base, in, out, false)
				plain.Input = typ
				rc := plain
				rc.Recompute = true
				p, err := PlanLinear(plain, T, c.w)
				must(t, err)
				m, err := PlanLinear(rc, T, c.w)
				must(t, err)
				x := up(T*in) + up(ScaleBytes(T, in, c.base.layout()))
				want := LinearMemory{Kept: 0, BF16: 2 * T * in, Transient: x + p.Transient, Products: p.Products}
				if m != want {
					t.Errorf("%s %v %v: %+v, want %+v", c.name, typ, s, m, want)
				}
			}
		}
	}
}

// TestPlanLinearGPT reports the memory kept per linear layer of the 1.3B
// GPT against bfloat16 activations and checks the goal (at most
// 0.52x without KeepTransposed).
func TestPlanLinearGPT(t *testing.T) {
	for _, c := range []struct {
		name string
		base LinearConfig
		w    Layout
	}{{"per-tensor", perTensorLinear, PerTensor}, {"blocks", blockLinear, Tiles128}} {
		for _, l := range gptLinears {
			for _, keep := range []bool{false, true} {
				m, err := PlanLinear(linearConfig(c.base, l.in, l.out, keep), gptTokens, c.w)
				must(t, err)
				ratio := float64(m.Kept) / float64(m.BF16)
				t.Logf("%s %s keep=%v: kept %.1f MiB = %.4fx BF16, transient %.1f MiB, products %.1f MiB",
					c.name, l.name, keep, float64(m.Kept)/(1<<20), ratio, float64(m.Transient)/(1<<20), float64(m.Products)/(1<<20))
				if !keep && ratio > 0.52 {
					t.Errorf("%s %s: kept %.4fx of BF16, want <= 0.52", c.name, l.name, ratio)
				}
			}
		}
	}
}

func TestLinearConfigRefusals(t *testing.T) {
	for _, c := range []struct {
		name string
		c    LinearConfig
		want error
	}{
		{"in not a multiple of 16", linearConfig(perTensorLinear, 24, 32, false), ErrShape},
		{"out zero", linearConfig(perTensorLinear, 32, 0, false), ErrShape},
		{"delayed scaling", LinearConfig{In: 32, Out: 32, X: e4Delayed, DY: e5Delayed}, ErrLayout},
		{"MXFP8", LinearConfig{In: 32, Out: 32, X: e4MX, DY: e5MX}, ErrLayout},
		{"mixed scalings", LinearConfig{In: 32, Out: 32, X: e4Current, DY: e5Blocks}, ErrLayout},
		{"uint8 input", LinearConfig{In: 32, Out: 32, Input: buffer.Uint8, X: e4Current, DY: e5Current}, ErrLayout},
		{"recompute and keep", LinearConfig{In: 32, Out: 32, X: e4Current, DY: e5Current, Recompute: true, KeepTransposed: true}, ErrLayout},
	} {
		_, err := PlanLinear(c.c, 64, PerTensor)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

// rowsQuant quantizes the row-major rows x cols matrix v in 1x128 blocks
// along its rows on the CPU (fp8.CastBlocks1D per row), the scales in the
// Rows128 layout.
func rowsQuant(v []float32, rows, cols int, r fp8.Recipe) hostOperand {
	nb := ceilDiv(cols, 128)
	codes, scales := make([]byte, rows*cols), make([]float32, rows*nb)
	inv := make([]float32, nb)
	for i := range rows {
		fp8.CastBlocks1D(codes[i*cols:(i+1)*cols], inv, v[i*cols:(i+1)*cols], 128, r.Format, r.Margin, r.PowerOf2)
		for j, s := range inv {
			scales[j*rows+i] = s
		}
	}
	return hostOperand{o: Operand{Rows: rows, Cols: cols, Format: r.Format, Scales: Rows128}, codes: codes,
		scales: f32Bytes(scales)}
}

// colsQuant quantizes v in 1x128 blocks down its columns, stored
// transposed, as Quantize does into an operand stored Transposed.
func colsQuant(v []float32, rows, cols int, r fp8.Recipe) hostOperand {
	h := rowsQuant(transposeF32(v, rows, cols), cols, rows, r)
	h.o.Rows, h.o.Cols, h.o.Transposed = rows, cols, true
	return h
}

// requant is the CPU reference of transposeActivation for 1x128 blocks:
// the kept operand decoded (float32 product), rounded to bfloat16 and
// quantized down the columns.
func requant(h hostOperand, r fp8.Recipe) hostOperand {
	dec := h.decode(true)
	v := make([]float32, len(dec))
	for i, x := range dec {
		v[i] = float32(x)
	}
	return colsQuant(v, h.o.Rows, h.o.Cols, r)
}

func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		u := math.Float32bits(x)
		b[4*i], b[4*i+1], b[4*i+2], b[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
	}
	return b
}

// TestRequantizedError measures what re-quantizing the kept 1x128-row
// input down its columns (the block recipe's transient transpose) costs
// against quantizing the bfloat16 input down its columns directly (what a
// layer keeping the bfloat16 input would do), both compared with a float64
// weight gradient of the bfloat16 input, with float32 and with
// power-of-two scales. The GPU tests check that the device makes these CPU
// values bit for bit. Figures are logged; the assertion is that the second
// rounding at most doubles the error. Seen: float32 scales 1.47x the
// direct error (x and dW); power-of-two scales 1.00x (141 of 196608 values
// differ: a power-of-two rescaling of an FP8 value is exact unless it
// falls below the normal range of its column block).
func TestRequantizedError(t *testing.T) {
	const T, in, out = 512, 384, 256
	xv, dyv := bf16Values(randMatrix(T, in, 11)), bf16Values(randMatrix(T, out, 12))
	X := make([]float64, len(xv))
	for i, v := range xv {
		X[i] = float64(v)
	}
	DY := colsQuant(dyv, T, out, e5Blocks).decode(false)
	dw := func(x []float64) []float64 {
		ref, _ := reference(out, in, T, func(p, k int) float64 { return DY[k*out+p] }, func(q, k int) float64 { return x[k*in+q] })
		return ref
	}
	exact := dw(X)
	for _, pow2 := range []bool{false, true} {
		r := e4Blocks
		r.PowerOf2 = pow2
		rows := rowsQuant(xv, T, in, r)
		direct, again := colsQuant(xv, T, in, r), requant(rows, r)
		errX := func(h hostOperand) float64 { return relErr(h.decode(false), X) }
		errW := func(h hostOperand) float64 { return relErr(dw(h.decode(false)), exact) }
		dX, aX := errX(direct), errX(again)
		dW, aW := errW(direct), errW(again)
		t.Logf("power-of-2 scales %v: relative RMS error of x: rows %.3g (forward), columns direct %.3g, re-quantized %.3g (%.2fx)", pow2, errX(rows), dX, aX, aX/dX)
		t.Logf("power-of-2 scales %v: relative RMS error of dW: direct %.3g, re-quantized %.3g (%.2fx)", pow2, dW, aW, aW/dW)
		diff, a := 0, again.decode(false)
		for i, v := range direct.decode(false) {
			if v != a[i] {
				diff++
			}
		}
		t.Logf("power-of-2 scales %v: %d of %d values differ from the direct column quantization", pow2, diff, T*in)
		if aX > 2*dX || aW > 2*dW {
			t.Errorf("power-of-2 %v: re-quantization error x %.3g, dW %.3g more than twice the direct %.3g, %.3g", pow2, aX, aW, dX, dW)
		}
	}
}

func bf16Values(v []float32) []float32 {
	for i, x := range v {
		v[i] = fp8.RoundBF16(x)
	}
	return v
}

// relErr returns ||got - want|| / ||want||.
func relErr(got, want []float64) float64 {
	var d, n float64
	for i := range want {
		d += (got[i] - want[i]) * (got[i] - want[i])
		n += want[i] * want[i]
	}
	return math.Sqrt(d / n)
}

// TestForwardQuantizedRecompute checks that ForwardQuantized refuses a
// Recompute layer (its Backward quantizes the restored input again)
// before calling fill or touching the device.
func TestForwardQuantizedRecompute(t *testing.T) {
	c := linearConfig(perTensorLinear, 64, 32, false)
	c.Recompute = true
	l := &Linear{c: c}
	called := false
	_, err := l.ForwardQuantized(Output{}, 64, Operand{Rows: 32, Cols: 64}, func(Operand) error { called = true; return nil })
	if !errors.Is(err, ErrLayout) || called {
		t.Errorf("ForwardQuantized with Recompute: error %v, fill called %v; want ErrLayout and no call", err, called)
	}
}
