package fp8

import "testing"

// TestRecipeFacts checks the facts of every recipe against what the
// recipe's documentation says of it (the values the optimizer, planner and
// backends used to spell out in switches of their own).
func TestRecipeFacts(t *testing.T) {
	for _, c := range []struct {
		s          Scaling
		source     ScaleSource
		local      bool
		scaleType  ScaleType
		slots      int // AmaxSlots of a 300x200 tensor
		blockBytes int // BlockScaleBytes of 256 elements
	}{
		{TensorCurrent, FromCurrent, false, ScaleFloat32, 1, 0},
		{TensorDelayed, FromHistory, false, ScaleFloat32, 1, 0},
		{Block1x128, FromBlock, true, ScaleFloat32, 0, 2 * 4},
		{Block128x128, FromCurrent, false, ScaleFloat32, 3 * 2, 0},
		{MXFP8, FromBlock, true, ScaleE8M0, 0, 8 * 1},
	} {
		for _, f := range []Format{E4M3, E5M2} {
			r := Recipe{Format: f, Scaling: c.s}
			if r.ScaleSource() != c.source {
				t.Errorf("%v: scale source %d, want %d", r, r.ScaleSource(), c.source)
			}
			if r.LocalBlocks() != c.local || r.ScaleType() != c.scaleType || r.AmaxSlots([]int{300, 200}) != c.slots ||
				r.BlockScaleBytes(256) != c.blockBytes || r.DataBytes(1000) != 1000 {
				t.Errorf("%v: local %t scale type %v slots %d block scale bytes %d data bytes %d, want %t %v %d %d 1000",
					r, r.LocalBlocks(), r.ScaleType(), r.AmaxSlots([]int{300, 200}), r.BlockScaleBytes(256), r.DataBytes(1000),
					c.local, c.scaleType, c.slots, c.blockBytes)
			}
			if c.local {
				// A whole tensor's block scales are NumScales stored scales.
				if got, want := r.BlockScaleBytes(1000), r.NumScales([]int{1000})*r.ScaleType().Size(); got != want {
					t.Errorf("%v: BlockScaleBytes(1000) = %d, want %d", r, got, want)
				}
			}
		}
	}
}
