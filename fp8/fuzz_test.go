package fp8

import (
	"encoding/binary"
	"math"
	"testing"
)

// FuzzEncodeDecode checks Encode against the float64 reference and the
// round trip Encode(Decode(Encode(x))) == Encode(x) for any float32 bits.
func FuzzEncodeDecode(f *testing.F) {
	for _, b := range []uint32{0, 0x80000000, 0x3f800000, 0x43e00000, 0x43e80000, 0x7f800000,
		0xff800000, 0x7fc00000, 0xffffffff, 0x3b000000, 0x3a800000, 0x00000001, 0x477fe000} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b uint32) {
		x := math.Float32frombits(b)
		v := float64(x)
		_, e := math.Frexp(math.Abs(v))
		for _, c := range []struct {
			f       Format
			m, bias int
			maxv    float64
		}{{E4M3, 3, 7, 448}, {E5M2, 2, 15, 57344}} {
			code := c.f.Encode(x)
			if x != x {
				if code != c.f.NaN() {
					t.Fatalf("%v.Encode(NaN %#08x) = %#02x", c.f, b, code)
				}
				continue
			}
			if want := refFP8(v, e, c.m, c.bias, c.maxv); !sameValue(c.f.Decode(code), want) {
				t.Fatalf("%v.Encode(%g) = %#02x, want %g", c.f, x, code, want)
			}
			if again := c.f.Encode(c.f.Decode(code)); again != code {
				t.Fatalf("%v: Encode(Decode(%#02x)) = %#02x", c.f, code, again)
			}
		}
	})
}

// FuzzCastScaled checks CastScaled and Dequantize on arbitrary float32
// slices (the fuzz bytes, 4 per value) against the element-wise reference.
func FuzzCastScaled(f *testing.F) {
	f.Add([]byte{0, 0, 0x80, 0x3f, 0, 0, 0xc0, 0x7f}, float32(2), false)
	f.Add([]byte{0xff, 0xff, 0x7f, 0x7f, 0, 0, 0, 0x80, 1, 0, 0, 0}, float32(0x1p-20), true)
	f.Add([]byte{}, float32(1), false)
	f.Fuzz(func(t *testing.T, raw []byte, scale float32, e5m2 bool) {
		fm := E4M3
		if e5m2 {
			fm = E5M2
		}
		src := make([]float32, len(raw)/4)
		for i := range src {
			src[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		dst := make([]byte, len(src))
		amax := CastScaled(dst, src, scale, fm)
		if want := refAmax(src); math.Float32bits(amax) != math.Float32bits(want) {
			t.Fatalf("amax %#08x, want %#08x", math.Float32bits(amax), math.Float32bits(want))
		}
		for i, x := range src {
			if want := fm.Encode(refProduct(x, scale)); dst[i] != want {
				t.Fatalf("dst[%d] = %#02x, want %#02x", i, dst[i], want)
			}
		}
		back := make([]float32, len(src))
		inv := 1 / scale
		Dequantize(back, dst, inv, fm)
		for i, c := range dst {
			if want := refProduct(fm.Decode(c), inv); !sameValue(back[i], float64(want)) {
				t.Fatalf("Dequantize[%d] = %g, want %g", i, back[i], want)
			}
		}
	})
}
