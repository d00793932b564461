package fp8

import (
	"math"
	"testing"
)

// closedForm returns the value of code c from the definition of a binary
// format with m mantissa bits and bias bias, in float64 with math.Pow:
// (-1)^s * 2^(1-bias) * mant/2^m for exponent field 0, else
// (-1)^s * 2^(e-bias) * (1 + mant/2^m). Special codes are the caller's.
func closedForm(c uint8, m, bias int) float64 {
	s := 1.0
	if c&0x80 != 0 {
		s = -1
	}
	e := int(c&0x7f) >> m
	mant := float64(int(c) & (1<<m - 1))
	if e == 0 {
		return s * math.Pow(2, float64(1-bias)) * mant / math.Pow(2, float64(m))
	}
	return s * math.Pow(2, float64(e-bias)) * (1 + mant/math.Pow(2, float64(m)))
}

func TestDecodeClosedForm(t *testing.T) {
	for _, f := range []Format{E4M3, E5M2} {
		t.Run(f.String(), func(t *testing.T) {
			finite := 0
			for i := range 256 {
				c := uint8(i)
				got := f.Decode(c)
				var want float64
				switch {
				case f == E4M3 && c&0x7f == 0x7f, f == E5M2 && c&0x7f > 0x7c:
					if math.Float32bits(got) != DecodedNaN {
						t.Errorf("Decode(%#02x) = %#08x, want NaN %#08x", c, math.Float32bits(got), DecodedNaN)
					}
					continue
				case f == E5M2 && c&0x7f == 0x7c:
					want = math.Inf(1 - 2*int(c>>7))
				case f == E4M3:
					want = closedForm(c, 3, 7)
				default:
					want = closedForm(c, 2, 15)
				}
				if !sameValue(got, want) {
					t.Errorf("Decode(%#02x) = %g, want %g", c, got, want)
				}
				if !math.IsInf(want, 0) {
					finite++
					if math.Abs(want) > float64(f.Max()) {
						t.Errorf("Decode(%#02x) = %g exceeds Max %g", c, want, f.Max())
					}
				}
			}
			if want := map[Format]int{E4M3: 254, E5M2: 248}[f]; finite != want {
				t.Errorf("%d finite codes, want %d", finite, want)
			}
		})
	}
}

// TestEncodeDecodeRoundTrip checks that every non-NaN code survives
// Decode then Encode (so Encode never picks a second code for a value),
// except -Inf/+Inf of E5M2, which saturate to ±Max.
func TestEncodeDecodeRoundTrip(t *testing.T) {
	for _, f := range []Format{E4M3, E5M2} {
		for i := range 256 {
			c := uint8(i)
			v := f.Decode(c)
			want := c
			switch {
			case v != v:
				want = f.NaN()
			case math.IsInf(float64(v), 0):
				want = c&0x80 | f.Encode(f.Max())
			}
			if got := f.Encode(v); got != want {
				t.Errorf("%v: Encode(Decode(%#02x) = %g) = %#02x, want %#02x", f, c, v, got, want)
			}
		}
	}
}

func TestEncodeCases(t *testing.T) {
	nan := float32(math.NaN())
	negNaN := math.Float32frombits(0xffc00001)
	inf := float32(math.Inf(1))
	cases := []struct {
		name string
		f    Format
		x    float32
		want uint8
	}{
		{"zero", E4M3, 0, 0x00},
		{"negative zero", E4M3, float32(math.Copysign(0, -1)), 0x80},
		{"one", E4M3, 1, 0x38},
		{"max", E4M3, 448, 0x7e},
		{"just above max saturates", E4M3, 449, 0x7e},
		{"midpoint to 480 saturates", E4M3, 464, 0x7e},
		{"far above max saturates", E4M3, 1e30, 0x7e},
		{"+Inf saturates", E4M3, inf, 0x7e},
		{"-Inf saturates", E4M3, -inf, 0xfe},
		{"NaN", E4M3, nan, E4M3NaN},
		{"negative NaN drops sign", E4M3, negNaN, E4M3NaN},
		{"tie 1+1/16 to even 1", E4M3, 1 + 1.0/16, 0x38},
		{"tie 1+3/16 to even 1.25", E4M3, 1 + 3.0/16, 0x3a},
		{"round up across binade", E4M3, 1.9375, 0x40},
		{"round up across binade to 256", E4M3, 248, 0x78},
		{"smallest subnormal", E4M3, 0x1p-9, 0x01},
		{"half smallest subnormal ties to 0", E4M3, 0x1p-10, 0x00},
		{"above half smallest subnormal", E4M3, 0x1.000002p-10, 0x01},
		{"negative tiny to -0", E4M3, -0x1p-12, 0x80},
		{"largest subnormal rounds to smallest normal", E4M3, 0x1.ep-7, 0x08},
		{"float32 subnormal", E4M3, 0x1p-140, 0x00},
		{"E5M2 one", E5M2, 1, 0x3c},
		{"E5M2 max", E5M2, 57344, 0x7b},
		{"E5M2 midpoint to Inf saturates", E5M2, 61440, 0x7b},
		{"E5M2 +Inf saturates", E5M2, inf, 0x7b},
		{"E5M2 -Inf saturates", E5M2, -inf, 0xfb},
		{"E5M2 NaN", E5M2, nan, E5M2NaN},
		{"E5M2 negative NaN", E5M2, negNaN, E5M2NaN},
		{"E5M2 negative zero", E5M2, float32(math.Copysign(0, -1)), 0x80},
		{"E5M2 smallest subnormal", E5M2, 0x1p-16, 0x01},
		{"E5M2 tie 3/2 ulp up to even", E5M2, 0x1.cp-16, 0x02},
		{"E5M2 round up across binade", E5M2, 1.875, 0x40},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.f.Encode(c.x); got != c.want {
				t.Errorf("%v.Encode(%g) = %#02x, want %#02x", c.f, c.x, got, c.want)
			}
		})
	}
}

func TestFormatConstants(t *testing.T) {
	for _, c := range []struct {
		f    Format
		name string
		max  float32
		emax int
	}{{E4M3, "E4M3", 448, 8}, {E5M2, "E5M2", 57344, 15}} {
		if c.f.String() != c.name || c.f.Max() != c.max || c.f.EmaxElem() != c.emax {
			t.Errorf("%v: got %q %g %d, want %q %g %d", c.name, c.f.String(), c.f.Max(), c.f.EmaxElem(), c.name, c.max, c.emax)
		}
		// Max is the largest finite decoded value, and 2^EmaxElem the
		// largest power of two not above it.
		if got := c.f.Decode(c.f.Encode(c.max)); got != c.max {
			t.Errorf("%v: Max does not round-trip: %g", c.name, got)
		}
		if p := math.Ldexp(1, c.emax); p > float64(c.max) || 2*p <= float64(c.max) {
			t.Errorf("%v: 2^EmaxElem = %g does not bracket Max %g", c.name, p, c.max)
		}
	}
	if s := Format(9).String(); s != "Format(9)" {
		t.Errorf("invalid format String = %q", s)
	}
	for _, fn := range []func(){
		func() { Format(0).Max() },
		func() { Format(3).Encode(1) },
		func() { Format(0).Decode(1) },
	} {
		if !panics(fn) {
			t.Error("invalid Format did not panic")
		}
	}
}

// panics reports whether fn panics.
func panics(fn func()) (p bool) {
	defer func() { p = recover() != nil }()
	fn()
	return false
}
