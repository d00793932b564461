package backend

import (
	"fmt"
	"math"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/fp8"
)

// MomentDType is the storage of one moment buffer.
type MomentDType uint8

const (
	// MomentDefault takes the configuration's MomentType (float32 or
	// bfloat16 for every moment).
	MomentDefault MomentDType = iota
	// MomentFloat32 stores each element as float32.
	MomentFloat32
	// MomentBFloat16 stores each element as bfloat16 (round to nearest even).
	MomentBFloat16
	// MomentFP8 stores each element as one E4M3 byte with a float32
	// scale_inv per block of MomentBlock elements (EncodeMomentBlock): the
	// first moment (and SGD's momentum) linearly, the second moment as its
	// square root.
	MomentFP8
)

// DefaultMomentBlock is the default block of FP8 moments in elements.
const DefaultMomentBlock = 128

// MomentBlocks lists the block sizes FP8 moments may take: 4-element
// groups of 8, 16 or 32 lanes of a warp (update.cu).
var MomentBlocks = []int{32, 64, 128}

var momentNames = [...]string{MomentDefault: "default", MomentFloat32: "float32", MomentBFloat16: "bfloat16", MomentFP8: "fp8"}

// String returns "float32", "bfloat16", "fp8" or "default".
func (t MomentDType) String() string {
	if int(t) < len(momentNames) {
		return momentNames[t]
	}
	return fmt.Sprintf("MomentDType(%d)", uint8(t))
}

// ParseMomentDType is String's inverse ("fp32", "f32", "bf16" and "e4m3"
// accepted too).
func ParseMomentDType(s string) (MomentDType, error) {
	switch s {
	case "float32", "fp32", "f32":
		return MomentFloat32, nil
	case "bfloat16", "bf16":
		return MomentBFloat16, nil
	case "fp8", "e4m3":
		return MomentFP8, nil
	}
	return 0, fmt.Errorf("backend: moment type %q (float32, bfloat16 or fp8)", s)
}

// MomentOf returns the MomentDType of a float32 or bfloat16 DType, and
// MomentDefault for any other.
func MomentOf(dt buffer.DType) MomentDType {
	switch dt {
	case buffer.Float32:
		return MomentFloat32
	case buffer.BFloat16:
		return MomentBFloat16
	}
	return MomentDefault
}

// ElemBytes is the size of one element's storage (1 for FP8, whose block
// scales come on top: ScaleBytes); 0 for MomentDefault.
func (t MomentDType) ElemBytes() int {
	return [...]int{0, 4, 2, 1}[min(int(t), 3)]
}

// ScaleBytes is the size of the block scales of n elements in blocks of
// block: 4 bytes per started block for FP8, 0 otherwise.
func (t MomentDType) ScaleBytes(n, block int) int {
	if t != MomentFP8 {
		return 0
	}
	return 4 * ((n + block - 1) / block)
}

// Bytes is the size of a moment buffer of n elements: ElemBytes each,
// then (FP8) the float32 block scales from byte n on.
func (t MomentDType) Bytes(n, block int) int { return n*t.ElemBytes() + t.ScaleBytes(n, block) }

// MomentFormat is the FP8 format of FP8 moments.
const MomentFormat = fp8.E4M3

// MomentScale returns the scale and scale_inv of a block of FP8 moments whose
// stored values have the amax key k: fp8.ScaleFromAmax(amax, E4M3, margin
// 0, power of two), the largest power of two 2^s with amax*2^s <= 448,
// computed from the bits without a division (for amax = M*2^E, M in
// [1, 2): s = 8-E, less one when M > 1.75; at most 127; 1 for a zero,
// infinite or NaN amax). Power-of-two scales make both the scaling and the
// decoding exact, so a block that is decoded and encoded again (a
// checkpoint, a step that leaves it unchanged) keeps its values.
func MomentScale(k uint32) (scale, scaleInv float32) {
	if k == 0 || k >= 0x7f800000 {
		return 1, 1
	}
	s := 127 // a subnormal amax: 448/amax overflows, clamped to 2^127
	if e := int(k >> 23); e > 0 {
		s = 8 - (e - 127)
		if k&0x7fffff > 0x600000 { // M > 1.75
			s--
		}
		s = min(s, 127)
	}
	return float32(math.Ldexp(1, s)), float32(math.Ldexp(1, -s))
}

// EncodeMomentBlock stores the moment values x of one block (at most a block
// of elements) as E4M3 codes and returns the block's scale_inv:
//
//	y[i]    = x[i], or sqrt32(x[i]) when root (the second moment)
//	k       = max AbsBits(y[i])
//	scale   = MomentScale(k)
//	z[i]    = float32(y[i] * scale)                     (exact: a power of two)
//	dst[i]  = E4M3.Encode(z[i])                          first moment
//	dst[i]  = EncodeDither(z[i], DitherBits(seed, pos+i)) second moment, k finite
//	dst[i]  = E4M3.Encode(|z[i]|)                        second moment, k Inf or NaN
//	return    1/scale
//
// The second moment is rounded stochastically (EncodeDither: to one of its
// two E4M3 neighbours, up with the probability of its place between them,
// to 2^-16), so that the small change beta2 makes to it in a step (0.1%)
// survives in expectation instead of being rounded away every step (3
// mantissa bits). pos is the element's place in its bucket, which does not
// depend on the data-parallel size; seed is MomentSeed of the step and
// bucket. DecodeMoment inverts the encoding up to its rounding; values that
// DecodeMoment returned encode back to themselves whatever the seed.
func EncodeMomentBlock(dst []byte, x []float32, root bool, seed uint32, pos uint64) float32 {
	var k uint32
	var stack [128]float32 // the largest of MomentBlocks: no allocation
	y := stack[:0]
	if len(x) > len(stack) {
		y = make([]float32, 0, len(x))
	}
	y = y[:len(x)]
	for i, v := range x {
		if root {
			v = sqrt32(v)
		}
		y[i] = v
		k = max(k, AbsBits(v))
	}
	scale, inv := MomentScale(k)
	for i, v := range y {
		z := float32(v * scale)
		switch {
		case !root:
			dst[i] = MomentFormat.Encode(z)
		case k < 0x7f800000:
			dst[i] = EncodeDither(z, DitherBits(seed, pos+uint64(i)))
		default:
			dst[i] = MomentFormat.Encode(math.Float32frombits(AbsBits(z)))
		}
	}
	return inv
}

// MomentSeed is the seed of the stochastic rounding of the second moments
// of bucket in step.
func MomentSeed(step, bucket int) uint32 {
	return mix32(uint32(step)*0x9e3779b9 ^ uint32(bucket)*0x85ebca77 ^ 0x27d4eb2f)
}

// MomentHash returns 32 random bits of the index q under seed: murmur3's
// finaliser of the seed and both halves of q.
func MomentHash(seed uint32, q uint64) uint32 {
	return mix32(seed ^ uint32(q) ^ uint32(q>>32)*0xc2b2ae35)
}

// DitherBits returns the 16 random bits of the element at pos under seed:
// half pos&1 (0: the low one) of MomentHash(seed, pos>>1), so that one hash
// serves two neighbouring elements.
func DitherBits(seed uint32, pos uint64) uint32 {
	return MomentHash(seed, pos>>1) >> (16 * (pos & 1)) & 0xffff
}

// mix32 is murmur3's 32-bit finaliser.
func mix32(x uint32) uint32 {
	x ^= x >> 16
	x *= 0x85ebca6b
	x ^= x >> 13
	x *= 0xc2b2ae35
	x ^= x >> 16
	return x
}

// DitherOffset is the offset EncodeDither adds to the bits of |z| for the
// random bits r (0 <= r < 2^16): 16r + 8 - 2^19, in (-2^19, 2^19), centred
// on zero.
func DitherOffset(r uint32) int32 { return int32(r<<4) + 8 - 1<<19 }

// EncodeDither rounds the finite z, |z| <= 448, to E4M3 stochastically with
// the 16 random bits r and returns the code of |z| so rounded:
//
//	d = max(AbsBits(z), 2^19) + DitherOffset(r)        (in (0, 2^20) below 2^19)
//	code = E4M3.Encode(float32frombits(d))
//
// In E4M3's normal range (|z| >= 2^-6) one E4M3 step is 2^20 units of the
// float32 bits, and the bits are linear in the value between two
// neighbours, so adding a uniform offset of (-1/2, 1/2) step and rounding
// to nearest (the hardware conversion) gives the upper neighbour with the
// probability of z's place between them (quantised to 2^-16): the rounding
// is unbiased. An E4M3 value (any r) comes back as itself: the offset stays
// under half a step. (Values below 2^19 units, float32 subnormals, encode
// to zero either way: the floor only keeps d positive.) Below 2^-6 (E4M3's subnormals, steps of 2^21 units and
// more, the block's smallest 2^-15 of its amax) the dither covers only part
// of a step: values there round to nearest unless they lie within 2^19
// units of a midpoint. The sign of z is dropped (the second moment's root
// is never negative).
func EncodeDither(z float32, r uint32) uint8 {
	d := int32(max(AbsBits(z), 1<<19)) + DitherOffset(r)
	return MomentFormat.Encode(math.Float32frombits(uint32(d)))
}

// DecodeMoment returns the moment value of an FP8 code of a block with
// scale_inv inv: r = float32(Decode(code) * inv), and float32(r*r) when
// root. Both products are exact for finite values (inv is a power of two, r
// has at most 4 significant bits).
func DecodeMoment(code byte, inv float32, root bool) float32 {
	r := float32(MomentFormat.Decode(code) * inv)
	if root {
		return float32(r * r)
	}
	return r
}

// MomentTypes returns the storage of a's M and V (MomentDefault resolved
// from MomentType).
func (a *UpdateArgs) MomentTypes() (m, v MomentDType) {
	m, v = a.MType, a.VType
	if m == MomentDefault {
		m = MomentOf(a.MomentType)
	}
	if v == MomentDefault {
		v = MomentOf(a.MomentType)
	}
	return m, v
}
