package fp8

import (
	"math"
	"math/rand/v2"
	"testing"
)

// refAmax is the reference of Amax, written with float64 comparisons: NaN
// wins over everything (the NaN of largest payload among NaNs), then the
// largest |x|.
func refAmax(src []float32) float32 {
	best := 0.0
	var nan uint32
	for _, x := range src {
		if x != x {
			nan = max(nan, math.Float32bits(x)&0x7fffffff)
			continue
		}
		best = math.Max(best, math.Abs(float64(x)))
	}
	if nan != 0 {
		return math.Float32frombits(nan)
	}
	return float32(best)
}

// randomSlice returns n float32 values of mixed magnitudes and signs.
func randomSlice(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(r.NormFloat64() * math.Ldexp(1, r.IntN(40)-20))
	}
	return s
}

func TestAmax(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	nan := math.Float32frombits(0x7fc00000)
	bigNaN := math.Float32frombits(0xffc12345)
	inf := float32(math.Inf(-1))
	for _, n := range []int{0, 1, 3, 4, 5, 1000, parallelMin - 1, parallelMin, parallelMin + 1, 3*parallelMin + 77} {
		base := randomSlice(r, n)
		negZero := float32(math.Copysign(0, -1))
		for _, c := range []struct {
			name string
			edit func(s []float32)
		}{
			{"plain", func([]float32) {}},
			{"Inf", func(s []float32) { s[n/2] = inf }},
			{"NaN beats Inf", func(s []float32) { s[0], s[n-1] = inf, nan }},
			{"largest NaN payload", func(s []float32) { s[n/3], s[n-1] = nan, bigNaN }},
			{"negative zeros only", func(s []float32) {
				for i := range s {
					s[i] = negZero
				}
			}},
		} {
			src := append([]float32(nil), base...)
			if n > 0 {
				c.edit(src)
			}
			want := refAmax(src)
			if got := Amax(src); math.Float32bits(got) != math.Float32bits(want) {
				t.Errorf("n=%d %s: Amax = %#08x, want %#08x", n, c.name, math.Float32bits(got), math.Float32bits(want))
			}
		}
	}
}

func TestMaxAmax(t *testing.T) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	for _, c := range []struct{ a, b, want float32 }{
		{1, 2, 2},
		{-3, 2, 3},
		{inf, 5, inf},
		{nan, inf, nan},
		{0, float32(math.Copysign(0, -1)), 0},
	} {
		for _, ab := range [][2]float32{{c.a, c.b}, {c.b, c.a}} {
			got := MaxAmax(ab[0], ab[1])
			if math.Float32bits(got) != math.Float32bits(c.want) {
				t.Errorf("MaxAmax(%g, %g) = %g, want %g", ab[0], ab[1], got, c.want)
			}
		}
	}
}
