package checkpoint

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"

	"github.com/distopt/distopt/bf16"
	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/safetensors"
)

// fileDType is the safetensors type that holds elements of dt (Float32 or
// BFloat16).
func fileDType(dt buffer.DType) safetensors.DType {
	if dt == buffer.BFloat16 {
		return safetensors.BF16
	}
	return safetensors.F32
}

// encodeValues writes vals into dst as dt: F32 bit for bit, BF16 rounded to
// nearest even (exact for values that are bfloat16 already).
func encodeValues(dst []byte, vals []float32, dt safetensors.DType) {
	switch dt {
	case safetensors.F32:
		for i, x := range vals {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(x))
		}
	case safetensors.BF16:
		for i, x := range vals {
			binary.LittleEndian.PutUint16(dst[2*i:], bf16.FromFloat32(x))
		}
	default:
		panic(fmt.Sprintf("checkpoint: encodeValues to %s", dt))
	}
}

// writeValues writes vals to w as dt, a block at a time.
func writeValues(w io.Writer, vals []float32, dt safetensors.DType, buf []byte) error {
	per := len(buf) / dt.Size()
	for len(vals) > 0 {
		k := min(per, len(vals))
		b := buf[:k*dt.Size()]
		encodeValues(b, vals[:k], dt)
		if _, err := w.Write(b); err != nil {
			return err
		}
		vals = vals[k:]
	}
	return nil
}

// decodeValues converts len(dst) elements of type dt from src: F32 bit for
// bit; BF16 and F16 exactly (every value widens to float32 without
// rounding, NaN payloads kept in the high bits); F64 rounded to nearest
// even (overflow gives ±Inf). It panics on another type: callers check.
func decodeValues(dst []float32, src []byte, dt safetensors.DType) {
	switch dt {
	case safetensors.F32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case safetensors.BF16:
		for i := range dst {
			dst[i] = bf16.ToFloat32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case safetensors.F16:
		for i := range dst {
			dst[i] = float32FromF16(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case safetensors.F64:
		for i := range dst {
			dst[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(src[8*i:])))
		}
	default:
		panic(fmt.Sprintf("checkpoint: decodeValues from %s", dt))
	}
}

// float32FromF16 widens an IEEE binary16 value exactly.
func float32FromF16(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // Inf or NaN
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp == 0: // zero or subnormal: man * 2^-24
		v := float32(man) * (1.0 / (1 << 24))
		return math.Float32frombits(sign | math.Float32bits(v))
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
}
