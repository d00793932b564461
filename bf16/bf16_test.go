package bf16

import (
	"math"
	"testing"
)

// The exhaustive check of FromFloat32 over every float32 is fp8's
// TestExhaustive (through fp8.BF16FromFloat32, which calls it).

func TestBF16Cases(t *testing.T) {
	cases := []struct {
		name string
		x    float32
		want uint16
	}{
		{"one", 1, 0x3f80},
		{"negative zero", float32(math.Copysign(0, -1)), 0x8000},
		{"tie to even down", math.Float32frombits(0x3f808000), 0x3f80},
		{"tie to even up", math.Float32frombits(0x3f818000), 0x3f82},
		{"above tie", math.Float32frombits(0x3f808001), 0x3f81},
		{"round up across binade", math.Float32frombits(0x3fffffff), 0x4000},
		{"max float32 rounds to Inf", math.MaxFloat32, 0x7f80},
		{"-Inf", float32(math.Inf(-1)), 0xff80},
		{"NaN canonical", math.Float32frombits(0xffc00001), NaN},
		{"signalling NaN canonical", math.Float32frombits(0x7f800001), NaN},
		{"float32 subnormal", math.Float32frombits(0x00018000), 0x0002},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := FromFloat32(c.x); got != c.want {
				t.Errorf("FromFloat32(%#08x) = %#04x, want %#04x", math.Float32bits(c.x), got, c.want)
			}
			if got, want := Round(c.x), ToFloat32(c.want); math.Float32bits(got) != math.Float32bits(want) {
				t.Errorf("Round(%#08x) = %#08x, want %#08x", math.Float32bits(c.x), math.Float32bits(got), math.Float32bits(want))
			}
		})
	}
	// Widening is exact: every non-NaN bfloat16 survives the round trip.
	for h := range 1 << 16 {
		x := ToFloat32(uint16(h))
		if x != x {
			continue
		}
		if got := FromFloat32(x); got != uint16(h) {
			t.Errorf("FromFloat32(ToFloat32(%#04x)) = %#04x", h, got)
		}
	}
}
