package fp8

import (
	"math"
	"math/rand/v2"
	"testing"
)

// refScale is the reference of ScaleFromAmax in float64 arithmetic, rounding
// to float32 where the definition does (a float64 quotient or product of
// float32 values rounded to float32 is the correctly rounded float32 one).
func refScale(amax float32, f Format, margin int, pow2 bool) (float32, float32) {
	a := math.Abs(float64(amax))
	if a == 0 || math.IsInf(a, 0) || math.IsNaN(a) {
		return 1, 1
	}
	s := float64(float32(float64(f.Max()) / a))
	s = float64(float32(s * math.Ldexp(1, -margin)))
	s = math.Min(s, math.MaxFloat32) // float32 overflow gave +Inf
	s = math.Max(s, 0x1p-126)
	if pow2 {
		_, e := math.Frexp(s)
		s = math.Ldexp(1, e-1)
	}
	return float32(s), float32(1 / s)
}

func TestScaleFromAmax(t *testing.T) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	cases := []struct {
		name        string
		amax        float32
		f           Format
		margin      int
		pow2        bool
		scale, sinv float32
	}{
		{"zero amax", 0, E4M3, 0, false, 1, 1},
		{"negative zero amax", float32(math.Copysign(0, -1)), E4M3, 3, true, 1, 1},
		{"Inf amax", inf, E4M3, 0, false, 1, 1},
		{"-Inf amax", -inf, E5M2, 0, false, 1, 1},
		{"NaN amax", nan, E4M3, 2, true, 1, 1},
		{"exact", 448, E4M3, 0, false, 1, 1},
		{"margin", 448, E4M3, 2, false, 0.25, 4},
		{"negative margin", 448, E4M3, -1, false, 2, 0.5},
		{"E5M2", 7, E5M2, 0, false, 8192, 1.0 / 8192},
		{"pow2 rounds down", 100, E4M3, 0, true, 4, 0.25},
		{"tiny amax overflows to MaxFloat32", 0x1p-149, E4M3, 0, false, math.MaxFloat32, float32(1 / math.MaxFloat32)},
		{"tiny amax pow2", 0x1p-149, E4M3, 0, true, 0x1p127, 0x1p-127},
		{"huge amax and margin clamp", math.MaxFloat32, E4M3, 10, false, 0x1p-126, 0x1p126},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, inv := ScaleFromAmax(c.amax, c.f, c.margin, c.pow2)
			if s != c.scale || inv != c.sinv {
				t.Errorf("ScaleFromAmax(%g, %v, %d, %t) = %g, %g, want %g, %g", c.amax, c.f, c.margin, c.pow2, s, inv, c.scale, c.sinv)
			}
		})
	}
}

// TestScaleFromAmaxRandom compares ScaleFromAmax with refScale on amaxes
// spread over the whole float32 range, subnormals included.
func TestScaleFromAmaxRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 200000 {
		amax := math.Float32frombits(r.Uint32() & 0x7f7fffff)
		f := []Format{E4M3, E5M2}[r.IntN(2)]
		margin := r.IntN(21) - 10
		pow2 := r.IntN(2) == 0
		s, inv := ScaleFromAmax(amax, f, margin, pow2)
		ws, winv := refScale(amax, f, margin, pow2)
		if s != ws || inv != winv {
			t.Fatalf("ScaleFromAmax(%#08x, %v, %d, %t) = %g, %g, want %g, %g", math.Float32bits(amax), f, margin, pow2, s, inv, ws, winv)
		}
		if math.IsInf(float64(inv), 0) || inv == 0 && s != math.MaxFloat32 {
			t.Fatalf("ScaleFromAmax(%g): scale_inv %g not finite and positive", amax, inv)
		}
	}
}
