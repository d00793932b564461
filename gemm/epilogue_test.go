package gemm

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/fp8"
	icuda "github.com/distopt/distopt/internal/cuda"
)

// TestBiasRefusals checks, without a GPU, that an Engine (nil here: never
// reached) and a Linear refuse outputs whose bias they cannot write, with
// errors matching ErrLayout, before touching the device: a bias type
// other than bfloat16, a bias type without a bias, a bias with
// Accumulate, an odd bias address. The outputs BF16Bias makes pass the
// check.
func TestBiasRefusals(t *testing.T) {
	var e *Engine
	l := &Linear{e: e, c: LinearConfig{In: 64, Out: 32}}
	x := Operand{Rows: 32, Cols: 64, Format: fp8.E4M3, Scales: PerTensor}
	w := Operand{Rows: 32, Cols: 64, Format: fp8.E4M3, Scales: PerTensor}
	for _, c := range []struct {
		name string
		out  Output
	}{
		{"float32 bias", Output{Data: 256, Type: buffer.BFloat16, Bias: 512, BiasType: buffer.Float32}},
		{"uint8 bias", Output{Data: 256, Type: buffer.BFloat16, Bias: 512, BiasType: buffer.Uint8}},
		{"bias type, no bias", Output{Data: 256, Type: buffer.BFloat16, BiasType: buffer.BFloat16}},
		{"bias with Accumulate", Output{Data: 256, Type: buffer.Float32, Accumulate: true, Bias: 512}},
		{"odd bias address", Output{Data: 256, Type: buffer.BFloat16, Bias: 513}},
	} {
		if _, err := e.Forward(c.out, x, w); !errors.Is(err, ErrLayout) {
			t.Errorf("Forward, %s: %v, want ErrLayout", c.name, err)
		} else {
			t.Logf("%s: %v", c.name, err)
		}
		if _, err := l.Forward(c.out, 0, 32, w); !errors.Is(err, ErrLayout) {
			t.Errorf("Linear.Forward, %s: %v, want ErrLayout", c.name, err)
		}
		if _, err := e.WGrad(c.out, x, x); !errors.Is(err, ErrLayout) {
			t.Errorf("WGrad, %s: %v, want ErrLayout", c.name, err)
		}
	}
	for _, o := range []Output{BF16Bias(256, 512), BF16Bias(256, 514), {Data: 256, Type: buffer.Float32, Bias: 512}, BF16(256)} {
		if err := o.check(); err != nil {
			t.Errorf("%+v: %v", o, err)
		}
	}
	for _, c := range []struct {
		bias cuda.DevicePtr
		want int
	}{{0x1000, 256}, {0x1080, 128}, {0x1002, 2}, {0x1010, 16}} {
		if got := (Output{Bias: c.bias}).biasAlign(); got != c.want {
			t.Errorf("bias at %#x: alignment %d, want %d", uint64(c.bias), got, c.want)
		}
	}
}

// bf16Ulp returns the spacing of bfloat16 values at |v| (8 significant
// bits; the smallest normal's spacing below it).
func bf16Ulp(v float64) float64 {
	_, e := math.Frexp(math.Abs(v))
	return math.Ldexp(1, max(e, -125)-8)
}

// TestBiasEpilogue runs Forward with the bias in cuBLASLt's epilogue
// (BF16Bias, and a float32 output with a bias) for the tensor-core recipes
// and the fallback, at the shapes of TestProducts, with the bias at an
// aligned address and at a 2-byte offset, and compares:
//
//   - with a float64 reference, the decoded FP8 product plus the bias:
//     |got - ref| <= one bfloat16 ulp of ref + 2^-10 sum |a b|. The
//     rounding to bfloat16 takes half an ulp; the rest of the ulp and the
//     second term (TestProducts' allowance) cover the FP8 tensor cores'
//     accumulation. Float32 outputs: TestProducts' tolerance.
//   - with today's two passes, the float32 product of the same engine
//     plus the bias, rounded to nearest even on the CPU (what
//     GPTBiasAddBF16 writes): every element within one bfloat16 ulp plus
//     2^-20 sum |a b| (summation order, where the bias cancels the
//     product); it logs how many differ (another kernel may sum in another order, and
//     the addition's type and rounding are not documented).
func TestBiasEpilogue(t *testing.T) {
	e := newEngine(t)
	for _, c := range []recipeCase{recipeCases[0], recipeCases[2], recipeCases[3]} {
		for _, sh := range shapes {
			t.Run(fmt.Sprintf("%s/T=%d,in=%d,out=%d", c.name, sh[0], sh[1], sh[2]), func(t *testing.T) {
				checkBias(t, e, c, sh[0], sh[1], sh[2])
			})
		}
	}
}

func checkBias(t *testing.T, e *Engine, c recipeCase, T, in, out int) {
	seed := uint64(T*5 + in*3 + out)
	hw := weight(t, randMatrix(out, in, seed), out, in, c.w)
	w := hw.upload(t, e)
	x, hx := activation(t, e, c, c.x, randMatrix(T, in, seed+1), T, in, false)
	bf := c.path == FallbackDequantBF16
	W, X := hw.decode(bf), hx.decode(bf)
	ref, mag := reference(T, out, in, func(p, k int) float64 { return X[p*in+k] }, func(q, k int) float64 { return W[q*in+k] })
	r := rand.New(rand.NewPCG(seed, 3))
	bias := make([]uint16, out+1)
	for i := range bias {
		bias[i] = fp8.BF16FromFloat32(float32(r.NormFloat64() * 4))
	}
	bufB := devAlloc(t, e.d, 2*len(bias)+256)

	y32 := devAlloc(t, e.d, 4*T*out)
	_, err := e.Forward(Output{Data: cuda.DevicePtr(y32), Type: buffer.Float32}, x, w)
	must(t, err)
	raw := make([]byte, 4*T*out)
	must(t, e.s.Download(raw, y32))
	plain := decodeOut(raw, buffer.Float32)

	for _, off := range []int{0, 2} {
		bp := bufB.Add(off)
		must(t, e.s.Upload(bp, icuda.Bytes(bias[:out])))
		y := devAlloc(t, e.d, 2*T*out)
		res, err := e.Forward(BF16Bias(cuda.DevicePtr(y), cuda.DevicePtr(bp)), x, w)
		if !biasRefused(t, "bfloat16", err, off, bf) {
			checkBiasBF16(t, e, res, c.path, y, ref, mag, plain, bias, T, out, off)
		}

		res, err = e.Forward(Output{Data: cuda.DevicePtr(y32), Type: buffer.Float32, Bias: cuda.DevicePtr(bp)}, x, w)
		if biasRefused(t, "float32", err, off, bf) {
			continue
		}
		must(t, e.s.Download(raw, y32))
		withBias := make([]float64, T*out)
		for i := range withBias {
			withBias[i] = ref[i] + float64(fp8.Float32FromBF16(bias[i%out]))
		}
		compare(t, fmt.Sprintf("float32 with bias at +%d", off), decodeOut(raw, buffer.Float32), withBias, mag, nil, false)
	}
}

// biasRefused reports whether err refuses the bias epilogue of a product
// with a what output and the bias at +off, as cuBLASLt 13 does (measured
// 2026-12-05 on an H200): a bias only 2-byte aligned with FP8 inputs
// (CUBLAS_STATUS_NOT_SUPPORTED from the heuristic), which must be refused
// with an error matching ErrEpilogue that names the alignment; and the
// fallback's BF16 products (bf, CUBLAS_STATUS_INVALID_VALUE with a float32
// output), which may be refused, also with ErrEpilogue. Any other error,
// or none at +2 on the tensor cores, fails the test.
func biasRefused(t *testing.T, what string, err error, off int, bf bool) bool {
	t.Helper()
	if err == nil {
		if off == 2 && !bf {
			t.Errorf("%s output, bias at +2: no error, want one matching ErrEpilogue (cuBLASLt 13 refuses a 2-byte aligned bias)", what)
		}
		return false
	}
	if !errors.Is(err, ErrEpilogue) || (off == 0 && !bf) {
		t.Fatalf("%s output, bias at +%d: %v", what, off, err)
	}
	if off == 2 && !strings.Contains(err.Error(), "2-byte aligned") {
		t.Errorf("%s output, bias at +2: %v does not name the alignment", what, err)
	}
	t.Logf("%s output, bias at +%d refused: %v", what, off, err)
	return true
}

// checkBiasBF16 checks the bfloat16 output y of BF16Bias with the bias at
// +off against the reference and the two passes (TestBiasEpilogue).
func checkBiasBF16(t *testing.T, e *Engine, res Result, path Path, y icuda.DevicePtr, ref, mag []float64, plain []float32, bias []uint16, T, out, off int) {
	t.Helper()
	checkPath(t, "forward", res, path)
	got := readBF16(t, e, y, T*out)
	bad, differ := 0, 0
	for p := range T {
		for q := range out {
			i, b := p*out+q, fp8.Float32FromBF16(bias[q])
			want := ref[i] + float64(b)
			if d := math.Abs(float64(got[i]) - want); !(d <= bf16Ulp(want)+math.Ldexp(mag[i], -10)) {
				if bad++; bad <= 3 {
					t.Errorf("bias at +%d: element %d = %v, want %v ± %.3g", off, i, got[i], want, bf16Ulp(want)+math.Ldexp(mag[i], -10))
				}
			}
			two := fp8.RoundBF16(plain[i] + b)
			if got[i] != two {
				differ++
				// One ulp, plus 2^-20 sum |a b| (16 units of 2^-24): two
				// kernels that sum the same products in different orders
				// differ by that much where the bias cancels the product
				// (3 bfloat16 ulps at -7.5e-5 measured on an H200,
				// fallback T=128, 2026-12-05).
				tol := bf16Ulp(math.Max(math.Abs(float64(got[i])), math.Abs(float64(two)))) + math.Ldexp(mag[i], -20)
				if d := math.Abs(float64(got[i] - two)); !(d <= tol) {
					if bad++; bad <= 3 {
						t.Errorf("bias at +%d: element %d = %v, the two passes give %v: more than one ulp (+ 2^-20 sum |ab|) apart", off, i, got[i], two)
					}
				}
			}
		}
	}
	t.Logf("bias at +%d: %d of %d elements differ from the two passes (by at most one ulp + 2^-20 sum |ab|)", off, differ, T*out)
}
