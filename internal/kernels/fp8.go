package kernels

import (
	"fmt"

	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/internal/cuda"
)

// fp8Kernels names the kernels of fp8.cu by format.
var fp8Kernels = map[fp8.Format]struct{ encode, decode, castScaled string }{
	fp8.E4M3: {"fp8_encode_e4m3", "fp8_decode_e4m3", "fp8_cast_scaled_e4m3"},
	fp8.E5M2: {"fp8_encode_e5m2", "fp8_decode_e5m2", "fp8_cast_scaled_e5m2"},
}

func fp8Names(f fp8.Format) struct{ encode, decode, castScaled string } {
	names, ok := fp8Kernels[f]
	if !ok {
		panic(fmt.Sprintf("kernels: invalid FP8 format %v", f))
	}
	return names
}

// EncodeFP8 queues on s, for i < n: dst[i] = f.Encode(src[i]), where src
// holds float32 and dst bytes. Rounding is to nearest even with subnormals;
// |x| above f.Max() and ±Inf give ±Max (satfinite); every NaN gives 0x7f; a
// negative input that rounds to zero gives 0x80. It panics for an invalid
// format or a negative n.
func (k *Set) EncodeFP8(s *cuda.Stream, dst, src cuda.DevicePtr, n int, f fp8.Format) error {
	name := fp8Names(f).encode
	if !checkLen(name, n) {
		return nil
	}
	return k.launch1D(s, name, n, 4, new(cuda.Args).Ptr(dst).Ptr(src).U64(uint64(n)))
}

// DecodeFP8 queues on s, for i < n: dst[i] = f.Decode(src[i]), exact; NaN
// codes give the float32 NaN with bits fp8.DecodedNaN (0x7fc00000); E5M2's
// infinity codes give ±Inf. It panics for an invalid format or a negative n.
func (k *Set) DecodeFP8(s *cuda.Stream, dst, src cuda.DevicePtr, n int, f fp8.Format) error {
	name := fp8Names(f).decode
	if !checkLen(name, n) {
		return nil
	}
	return k.launch1D(s, name, n, 4, new(cuda.Args).Ptr(dst).Ptr(src).U64(uint64(n)))
}

// CastScaled queues on s the cast of fp8.CastScaled: for i < n, dst[i] =
// f.Encode(src[i] * scale), the product rounded to float32 first (no fused
// operation); and it folds the amax of src into the 32-bit word at amax:
// *amax = max(*amax, max over i of Float32bits(src[i]) & 0x7fffffff), so
// that NaN orders above +Inf above every finite value. Zero *amax first for
// the amax of src alone; read it as float32 bits. It panics for an invalid
// format or a negative n.
func (k *Set) CastScaled(s *cuda.Stream, dst, src cuda.DevicePtr, n int, scale float32, f fp8.Format, amax cuda.DevicePtr) error {
	name := fp8Names(f).castScaled
	if !checkLen(name, n) {
		return nil
	}
	return k.launch1D(s, name, n, 4, new(cuda.Args).Ptr(dst).Ptr(src).U64(uint64(n)).F32(scale).Ptr(amax))
}
