package backend_test

import (
	"fmt"

	"github.com/distopt/distopt/optimizer/backend"
)

// A rule's factors for one parameter at step 1, as the optimizer sends
// them for a segment and the kernels receive them.
func ExampleRule_Factors() {
	p := backend.Params{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}
	f := backend.RuleAdamW.Factors(p, 1, 1e-3, 0.1) // lr 1e-3, weight decay 0.1
	step, second := f.Pair(backend.RuleAdamW)
	fmt.Println(step, second, backend.RuleAdamW.Moments())
	// Output: 0.01 0.9999 [m v]
}

// CheckSegments names what is wrong with a table a backend must not be
// given.
func ExampleCheckSegments() {
	segs := []backend.Segment{
		{Off: 0, Len: 256, Mode: backend.ModeBlock},
		{Off: 200, Len: 10, Mode: backend.ModeTensorCurrent},
	}
	fmt.Println(backend.CheckSegments(segs, 1024, 128))
	// Output: backend: segment 1 (offset 200, length 10, mode 2) of a 1024-element shard: starts before the end 256 of the segment before it
}

// A block of second moments stored in FP8: the square roots are encoded
// with a power-of-two scale (stochastic rounding: values that are already
// E4M3 multiples of the scale come back exactly).
func ExampleEncodeMomentBlock() {
	v := []float32{4, 1, 0.25, 0}
	codes := make([]byte, len(v))
	inv := backend.EncodeMomentBlock(codes, v, true, 7, 0)
	fmt.Println("scale_inv:", inv)
	for _, c := range codes {
		fmt.Print(backend.DecodeMoment(c, inv, true), " ")
	}
	fmt.Println()
	// Output:
	// scale_inv: 0.0078125
	// 4 1 0.25 0
}
