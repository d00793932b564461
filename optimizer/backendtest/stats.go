package backendtest

import (
	"math/rand/v2"

	"github.com/distopt/distopt/optimizer/backend"
)

// BitsAndTies returns gradient statistics (limbs as GradStats leaves them)
// that probe the rounding of the exact sum of squares to float64
// (backend.SumOfSquaresNearest): every single bit of the limbs, then at
// every position a tie and a near-tie: a top bit, the 52 bits below it
// random, the round bit, and then nothing or one sticky bit below.
func BitsAndTies(r *rand.Rand) [][backend.StatsLen]int64 {
	const bits = 32*(backend.NormLimbs-1) + 62
	var out [][backend.StatsLen]int64
	for k := range bits {
		var s [backend.StatsLen]int64
		s[k/32] = 1 << (k % 32)
		out = append(out, s)
	}
	for top := 54; top < bits; top++ {
		for _, sticky := range []bool{false, true} {
			var s [backend.StatsLen]int64
			set := func(k int) { s[k/32] += 1 << (k % 32) }
			set(top)
			for k := top - 52; k < top; k++ {
				if r.IntN(2) == 1 {
					set(k)
				}
			}
			set(top - 53)
			if sticky {
				set(r.IntN(top - 53))
			}
			out = append(out, s)
		}
	}
	return out
}
