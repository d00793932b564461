package fp8

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestEncodersAgree compares the three encoders of each format, the
// select-based one of Encode, the branchy first formulation and the code
// table of CastScaled, on both edges of every class of the code table (low
// 16 bits 0, 1, 0x7fff, 0x8000 and 0xffff: every exponent, rounding
// position, range bound, Inf and NaN), on the ties and near-ties of every
// FP8 rounding position, and on random bit patterns. TestExhaustive covers
// all patterns in its long form.
func TestEncodersAgree(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	var patterns []uint32
	for hi := range uint32(1 << 16) {
		for _, lo := range []uint32{0, 1, 0x7fff, 0x8000, 0xffff} {
			patterns = append(patterns, hi<<16|lo)
		}
	}
	for sign := range uint32(2) {
		for e := range uint32(256) {
			for pos := uint32(19); pos < 24; pos++ { // rounding positions
				for _, d := range []int32{-1, 0, 1} {
					tie := sign<<31 | e<<23 | 1<<pos
					patterns = append(patterns, uint32(int32(tie)+d), uint32(int32(tie|1<<(pos+1))+d))
				}
			}
		}
	}
	for range 1 << 18 {
		patterns = append(patterns, r.Uint32())
	}
	for _, f := range []Format{E4M3, E5M2} {
		t.Run(f.String(), func(t *testing.T) {
			branchy, table := branchyEncoder(f), codeTables[f]()
			fails := 0
			for _, b := range patterns {
				x := math.Float32frombits(b)
				want := branchy(x)
				if got, tc := f.Encode(x), table.code(x); got != want || tc != want {
					t.Errorf("%#08x: Encode %#02x, table %#02x, branchy %#02x", b, got, tc, want)
					if fails++; fails == 10 {
						t.FailNow()
					}
				}
			}
			if t.Failed() {
				return
			}
			t.Logf("%d patterns agree", len(patterns))
		})
	}
}
