package kernels

import (
	"fmt"
	"math"

	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/fp8"
)

// The kernels of gptfused.cu: LayerNorm and GELU writing the next linear
// layer's FP8 input directly, with the codes and scales package gemm
// would make from their float32 outputs (gemm.Engine.Quantize).
const (
	kernelGPTLNAmax       = "gpt_ln_amax"
	kernelGPTLNCast       = "gpt_ln_cast_"
	kernelGPTLNRows128    = "gpt_ln_rows128_"
	kernelGPTBiasGELUAmax = "gpt_bias_gelu_amax"
	kernelGPTGELUCast     = "gpt_gelu_cast_"
	kernelGPTBiasGELURows = "gpt_bias_gelu_rows128_"
	kernelGPTGELUAmax     = "gpt_gelu_amax"
	kernelGPTGELURows     = "gpt_gelu_rows128_"
	// delayed scaling (FP8Out.Scale): one pass each
	kernelGPTLNDelayed       = "gpt_ln_delayed_"
	kernelGPTGELUDelayed     = "gpt_gelu_delayed_"
	kernelGPTBiasGELUDelayed = "gpt_bias_gelu_delayed_"
	kernelGPTActScales       = "gpt_act_scales"
)

// fusedFormats are the kernel name suffixes of the FP8 formats.
var fusedFormats = map[fp8.Format]string{fp8.E4M3: "e4m3", fp8.E5M2: "e5m2"}

// fusedKernels lists the kernels of gptfused.cu.
func fusedKernels() []string {
	names := []string{kernelGPTLNAmax, kernelGPTBiasGELUAmax, kernelGPTGELUAmax, kernelGPTActScales}
	for _, f := range fusedFormats {
		names = append(names, kernelGPTLNCast+f, kernelGPTLNRows128+f, kernelGPTGELUCast+f, kernelGPTBiasGELURows+f, kernelGPTGELURows+f,
			kernelGPTLNDelayed+f, kernelGPTGELUDelayed+f, kernelGPTBiasGELUDelayed+f)
		for _, v := range rowVariants {
			names = append(names, kernelGPTLNRows128+f+v.suffix, kernelGPTLNDelayed+f+v.suffix)
		}
	}
	for _, v := range rowVariants {
		names = append(names, kernelGPTLNAmax+v.suffix)
	}
	return names
}

// FP8Out is where a fused kernel writes a linear layer's quantized input
// [rows, n]: the codes at Data, row-major, and the scale_inv values at
// ScaleInv, as gemm.Engine.Quantize writes a gemm.Operand with Recipe:
// one float32 for fp8.TensorCurrent (gemm.PerTensor), and for
// fp8.Block1x128 (gemm.Rows128) one per run of 128 elements along a row,
// the scale_inv of run j of row r at ScaleInv[j*rows + r].
//
// Scale, when set (fp8.TensorCurrent only), asks for delayed scaling: the
// codes are cast in one pass with the float32 scale at Scale (derived from
// earlier amaxes by GPTActScales), scale_inv its reciprocal, and the
// output's amax is folded into the amax the launcher takes, which is not
// zeroed (GPTActScales zeroes it once it has used it).
type FP8Out struct {
	Data, ScaleInv cuda.DevicePtr
	Recipe         fp8.Recipe
	Scale          cuda.DevicePtr
}

// constants returns what the kernels' scale rule (scale_from_amax) takes
// of the recipe: its format's largest value, float32(2^-margin) as
// fp8.ScaleFromAmax computes it, and the power-of-2 flag.
func (o FP8Out) constants() (fmax, mfac float32, pow2 uint32) {
	if o.Recipe.PowerOf2 {
		pow2 = 1
	}
	return o.Recipe.Format.Max(), float32(math.Ldexp(1, -o.Recipe.Margin)), pow2
}

// args appends constants to a.
func (o FP8Out) args(a *cuda.Args) *cuda.Args {
	fmax, mfac, pow2 := o.constants()
	return a.F32(fmax).F32(mfac).U32(pow2)
}

// suffix returns the kernel name suffix of the recipe's format, refusing
// recipes the fused kernels do not write.
func (o FP8Out) suffix() (string, error) {
	f, ok := fusedFormats[o.Recipe.Format]
	if err := o.Recipe.Validate(); err != nil || !ok {
		return "", fmt.Errorf("kernels: FP8 output of recipe %v: %v", o.Recipe, err)
	}
	if s := o.Recipe.Scaling; s != fp8.TensorCurrent && s != fp8.Block1x128 {
		return "", fmt.Errorf("kernels: FP8 output of recipe %v: want fp8.TensorCurrent or fp8.Block1x128 scaling", o.Recipe)
	}
	if o.Scale != 0 && o.Recipe.Scaling != fp8.TensorCurrent {
		return "", fmt.Errorf("kernels: FP8 output of recipe %v with a delayed scale: want per-tensor scaling (fp8.TensorCurrent)", o.Recipe)
	}
	return f, nil
}

// LayerNormRows is the LayerNorm of GPTLayerNorm over X [Rows, N] (float32,
// bfloat16 W and B), its statistics written to Mean and Rstd ([Rows]): the
// same bits as GPTLayerNorm's when its output y is 16-byte aligned (device
// allocations are), since GPTLayerNorm picks its kernel from y, X, W and
// B.
// Unless Residual is 0, X holds a linear layer's product and is made the
// residual stream first, in place: X = (X + Bias) + Residual, the bits of
// GPTBiasResidual (Bias bfloat16 [N], Residual float32 [Rows, N]).
type LayerNormRows struct {
	X, W, B, Mean, Rstd cuda.DevicePtr
	Rows, N             int
	Eps                 float32
	Residual, Bias      cuda.DevicePtr
}

// variant returns the suffix of the register-resident kernels when they
// take the rows: GPTLayerNorm's choice (rowVariant) from X, W and B, so
// that the statistics are its bits whatever the alignment of Residual and
// Bias (read either way); words are the FP8 codes written a word at a
// time (0: none), which the 1x128 kernels need 4-byte aligned.
func (ln LayerNormRows) variant(words cuda.DevicePtr) string {
	if words%4 != 0 {
		return ""
	}
	return rowVariant(ln.N, []cuda.DevicePtr{ln.X}, []cuda.DevicePtr{ln.W, ln.B})
}

// GPTLayerNormFP8 queues ln (with its residual connection, see
// LayerNormRows) writing, instead of the float32 output GPTLayerNorm
// writes, its quantization into dst, bit for bit what gemm's Quantize
// writes from GPTLayerNorm's output, and the same X, Mean and Rstd:
//
//   - fp8.TensorCurrent: two passes over X: the statistics and the amax of
//     the output folded into the uint32 at amax (zeroed here first), then
//     the output recomputed and cast with fp8.ScaleFromAmax of that amax;
//   - fp8.Block1x128: one pass, each 1x128 block cast as soon as it is
//     computed (amax unused);
//   - delayed scaling (dst.Scale set): one pass, the output cast with the
//     scale at dst.Scale and its amax folded into amax (not zeroed).
//
// Per element it reads X once or twice and writes one byte, where
// GPTLayerNorm then Quantize read 4 + 4 + 4 + 4 bytes and write 4 + 1
// (plus GPTBiasResidual's 12 with the residual).
func (k *Set) GPTLayerNormFP8(s *cuda.Stream, dst FP8Out, amax cuda.DevicePtr, ln LayerNormRows) error {
	f, err := dst.suffix()
	if err != nil || !checkLen(kernelGPTLNAmax, ln.Rows) || !checkLen(kernelGPTLNAmax, ln.N) {
		return err
	}
	tail := func(a *cuda.Args) *cuda.Args {
		return a.Ptr(ln.X).Ptr(ln.Residual).Ptr(ln.Bias).Ptr(ln.W).Ptr(ln.B).U64(uint64(ln.Rows)).U64(uint64(ln.N)).F32(ln.Eps)
	}
	if dst.Recipe.Scaling == fp8.Block1x128 {
		a := new(cuda.Args).Ptr(dst.Data).Ptr(dst.ScaleInv).Ptr(ln.Mean).Ptr(ln.Rstd)
		return k.warpRows(s, kernelGPTLNRows128+f+ln.variant(dst.Data), ln.Rows, dst.args(tail(a)))
	}
	if dst.Scale != 0 { // the kernel of the statistics pass of current scaling: the same statistics
		a := new(cuda.Args).Ptr(dst.Data).Ptr(dst.ScaleInv).Ptr(dst.Scale).Ptr(amax).Ptr(ln.Mean).Ptr(ln.Rstd)
		return k.warpRows(s, kernelGPTLNDelayed+f+ln.variant(0), ln.Rows, tail(a))
	}
	if err := s.Memset32(amax, 0, 1); err != nil {
		return err
	}
	if err := k.warpRows(s, kernelGPTLNAmax+ln.variant(0), ln.Rows, tail(new(cuda.Args).Ptr(ln.Mean).Ptr(ln.Rstd).Ptr(amax))); err != nil {
		return err
	}
	a := new(cuda.Args).Ptr(dst.Data).Ptr(dst.ScaleInv).Ptr(amax).Ptr(ln.X).Ptr(ln.Mean).Ptr(ln.Rstd).Ptr(ln.W).Ptr(ln.B).
		U64(uint64(ln.Rows)).U64(uint64(ln.N))
	return k.warpRows(s, kernelGPTLNCast+f, ln.Rows, dst.args(a))
}

// GPTBiasGELUFP8 queues y = bf16(x + b) as GPTBiasAddBF16 writes it (x
// float32 [rows, n], a linear layer's product; b bfloat16 [n]; y bfloat16,
// kept) and the quantization of model.GELU(y) into dst, bit for bit what
// gemm's Quantize writes from GPTGELUBF16's float32 output, which is
// never written:
//
//   - fp8.TensorCurrent: the first pass writes y and folds the amax of
//     GELU(y) into the uint32 at amax (zeroed here first), the second
//     reads y again and writes the codes;
//   - fp8.Block1x128: one pass (amax unused);
//   - delayed scaling (dst.Scale set): one pass writing y and the codes,
//     the amax of GELU(y) folded into amax (not zeroed).
func (k *Set) GPTBiasGELUFP8(s *cuda.Stream, dst FP8Out, amax, y, x, b cuda.DevicePtr, rows, n int) error {
	f, err := dst.suffix()
	if err != nil || !checkLen(kernelGPTBiasGELUAmax, rows) || !checkLen(kernelGPTBiasGELUAmax, n) {
		return err
	}
	if dst.Recipe.Scaling == fp8.Block1x128 {
		a := new(cuda.Args).Ptr(dst.Data).Ptr(dst.ScaleInv).Ptr(y).Ptr(x).Ptr(b).U64(uint64(rows)).U64(uint64(n))
		return k.warpRows(s, kernelGPTBiasGELURows+f, rows*ceilDiv(n, 128), dst.args(a))
	}
	if dst.Scale != 0 {
		a := new(cuda.Args).Ptr(dst.Data).Ptr(dst.ScaleInv).Ptr(dst.Scale).Ptr(amax).Ptr(y).Ptr(x).Ptr(b).U64(uint64(rows)).U64(uint64(n))
		return k.elementwise(s, kernelGPTBiasGELUDelayed+f, rows*n, a)
	}
	if err := s.Memset32(amax, 0, 1); err != nil {
		return err
	}
	a := new(cuda.Args).Ptr(y).Ptr(x).Ptr(b).Ptr(amax).U64(uint64(rows)).U64(uint64(n))
	if err := k.elementwise(s, kernelGPTBiasGELUAmax, rows*n, a); err != nil {
		return err
	}
	return k.geluCast(s, dst, f, amax, y, rows*n)
}

// geluCast queues the codes of GELU(y) for the n bfloat16 y, with the
// scale of the amax at amax, into dst (per tensor).
func (k *Set) geluCast(s *cuda.Stream, dst FP8Out, f string, amax, y cuda.DevicePtr, n int) error {
	a := new(cuda.Args).Ptr(dst.Data).Ptr(dst.ScaleInv).Ptr(amax).Ptr(y).U64(uint64(n))
	return k.elementwise(s, kernelGPTGELUCast+f, n, dst.args(a))
}

// GPTGELUFP8 queues the quantization of model.GELU(y) into dst, y bfloat16
// [rows, n] as it is (fc with its bias, written by the GEMM's epilogue):
// GPTBiasGELUFP8's work without the bias and without writing y, bit for
// bit what gemm's Quantize writes from GPTGELUBF16's float32 output:
//
//   - fp8.TensorCurrent: the first pass folds the amax of GELU(y) into the
//     uint32 at amax (zeroed here first), the second writes the codes;
//   - fp8.Block1x128: one pass (amax unused);
//   - delayed scaling (dst.Scale set): one pass, the amax of GELU(y)
//     folded into amax (not zeroed).
func (k *Set) GPTGELUFP8(s *cuda.Stream, dst FP8Out, amax, y cuda.DevicePtr, rows, n int) error {
	f, err := dst.suffix()
	if err != nil || !checkLen(kernelGPTGELUAmax, rows) || !checkLen(kernelGPTGELUAmax, n) {
		return err
	}
	if dst.Recipe.Scaling == fp8.Block1x128 {
		a := new(cuda.Args).Ptr(dst.Data).Ptr(dst.ScaleInv).Ptr(y).U64(uint64(rows)).U64(uint64(n))
		return k.warpRows(s, kernelGPTGELURows+f, rows*ceilDiv(n, 128), dst.args(a))
	}
	if dst.Scale != 0 {
		a := new(cuda.Args).Ptr(dst.Data).Ptr(dst.ScaleInv).Ptr(dst.Scale).Ptr(amax).Ptr(y).U64(uint64(rows * n))
		return k.elementwise(s, kernelGPTGELUDelayed+f, rows*n, a)
	}
	if err := s.Memset32(amax, 0, 1); err != nil {
		return err
	}
	if err := k.elementwise(s, kernelGPTGELUAmax, rows*n, new(cuda.Args).Ptr(y).Ptr(amax).U64(uint64(rows*n))); err != nil {
		return err
	}
	return k.geluCast(s, dst, f, amax, y, rows*n)
}

// GPTActScales queues the scales of delayed scaling of the activations
// after a forward pass that folded n amaxes into amax (uint32 amax keys):
// row i of hist (a ring of l uint32 keys) takes amax[i] at position pos,
// its oldest (pos = the rolls so far mod l), amax[i] is zeroed for the
// next pass, and scale[i] (float32) becomes fp8.ScaleFromAmax of the
// row's largest key with r's format, margin and power-of-2 rule. It
// panics for l < 1 or pos outside [0, l).
func (k *Set) GPTActScales(s *cuda.Stream, scale, hist, amax cuda.DevicePtr, n, l, pos int, r fp8.Recipe) error {
	if l < 1 || pos < 0 || pos >= l {
		panic(fmt.Sprintf("kernels: %s at position %d of histories of length %d", kernelGPTActScales, pos, l))
	}
	if !checkLen(kernelGPTActScales, n) {
		return nil
	}
	a := new(cuda.Args).Ptr(scale).Ptr(hist).Ptr(amax).U64(uint64(n)).U32(uint32(l)).U32(uint32(pos))
	return k.warpRows(s, kernelGPTActScales, n, FP8Out{Recipe: r}.args(a))
}
