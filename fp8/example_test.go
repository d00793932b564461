package fp8_test

import (
	"fmt"
	"math"

	"github.com/distopt/distopt/fp8"
)

func ExampleFormat_Encode() {
	for _, x := range []float32{1, 0.3, 500, float32(math.Inf(-1)), float32(math.NaN())} {
		c := fp8.E4M3.Encode(x)
		fmt.Printf("%v -> %#02x -> %v\n", x, c, fp8.E4M3.Decode(c))
	}
	// Output:
	// 1 -> 0x38 -> 1
	// 0.3 -> 0x2a -> 0.3125
	// 500 -> 0x7e -> 448
	// -Inf -> 0xfe -> -448
	// NaN -> 0x7f -> NaN
}

func ExampleAmax() {
	fmt.Println(fp8.Amax([]float32{1, -7, 3}), fp8.Amax(nil))
	fmt.Println(fp8.MaxAmax(float32(math.Inf(1)), float32(math.NaN())))
	// Output:
	// 7 0
	// NaN
}

func ExampleScaleFromAmax() {
	fmt.Println(fp8.ScaleFromAmax(3.5, fp8.E4M3, 0, false))
	fmt.Println(fp8.ScaleFromAmax(3.5, fp8.E4M3, 1, true))
	fmt.Println(fp8.ScaleFromAmax(0, fp8.E4M3, 0, false))
	// Output:
	// 128 0.0078125
	// 64 0.015625
	// 1 1
}

func ExampleCastScaled() {
	src := []float32{0.5, -1.25, 3.5}
	scale, scaleInv := fp8.ScaleFromAmax(fp8.Amax(src), fp8.E4M3, 0, false)
	dst := make([]byte, len(src))
	amax := fp8.CastScaled(dst, src, scale, fp8.E4M3)
	back := make([]float32, len(src))
	fp8.Dequantize(back, dst, scaleInv, fp8.E4M3)
	fmt.Printf("amax %v codes %x back %v\n", amax, dst, back)
	// Output: amax 3.5 codes 68f27e back [0.5 -1.25 3.5]
}

// The delayed-scaling loop: cast with the history's scale, then push the
// (all-reduced) amax of the cast.
func ExampleAmaxHistory() {
	r := fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorDelayed, HistoryLen: 4}
	h := r.NewHistory()
	dst := make([]byte, 2)
	for step, src := range [][]float32{{1, 2}, {4, 1}, {0.5, 0.5}} {
		scale, _ := h.Scale(r.Format, r.Margin, r.PowerOf2)
		amax := fp8.CastScaled(dst, src, scale, r.Format)
		h.Push(amax) // after an all-reduce MAX of amax across ranks
		fmt.Printf("step %d: scale %v, amax %v\n", step, scale, amax)
	}
	// Output:
	// step 0: scale 1, amax 2
	// step 1: scale 224, amax 4
	// step 2: scale 112, amax 0.5
}

func ExampleCastBlocks1D() {
	src := make([]float32, 200) // two blocks of 128: the second one partial
	src[0], src[150] = 7, -0.25
	dst := make([]byte, len(src))
	scaleInv := make([]float32, 2)
	fp8.CastBlocks1D(dst, scaleInv, src, 128, fp8.E4M3, 0, true)
	fmt.Println(scaleInv, fp8.E4M3.Decode(dst[0])*scaleInv[0], fp8.E4M3.Decode(dst[150])*scaleInv[1])
	// Output: [0.015625 0.0009765625] 7 -0.25
}

// Two ranks own pieces of a 3x200 matrix split mid-row; each folds its
// tile amaxes, and the element-wise MAX of the two arrays is the amax of
// the whole matrix's tiles.
func ExampleTileAmax() {
	const rows, cols = 3, 200
	m := make([]float32, rows*cols)
	m[10], m[150], m[450] = 1, -5, 2
	a0 := make([]float32, 2)
	a1 := make([]float32, 2)
	fp8.TileAmax(a0, m[:320], 0, cols, 128)
	fp8.TileAmax(a1, m[320:], 320, cols, 128)
	fmt.Println(a0, a1, fp8.MaxAmax(a0[1], a1[1]))
	// Output: [1 5] [2 0] 5
}

func ExampleCastMX() {
	src := []float32{1, 0.5, -300, 0.001}
	dst := make([]byte, len(src))
	scales := make([]byte, 1)
	fp8.CastMX(dst, scales, src, fp8.E4M3)
	s := fp8.E8M0Value(scales[0])
	fmt.Printf("scale byte %d (%v):", scales[0], s)
	for _, c := range dst {
		fmt.Printf(" %v", fp8.E4M3.Decode(c)*s)
	}
	fmt.Println()
	// Output: scale byte 127 (1): 1 0.5 -288 0.001953125
}

func ExampleQuantize() {
	src := []float32{0.1, 0.2, 0.3, 0.4, 0.5, 0.6}
	r := fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}
	t, err := fp8.Quantize(src, []int{2, 3}, r, nil)
	if err != nil {
		panic(err)
	}
	back := make([]float32, len(src))
	if err := t.Dequantize(back); err != nil {
		panic(err)
	}
	fmt.Println(t.ScaleInv, back)
	// Output: [0.0013392858] [0.09642857 0.19285715 0.3 0.3857143 0.51428574 0.6]
}

func ExampleRecipe_Validate() {
	r := fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.MXFP8, Margin: 1}
	fmt.Println(r.Validate())
	r.Margin = 0
	fmt.Println(r.Validate(), r, r.NumScales([]int{10, 10}))
	// Output:
	// fp8: invalid recipe: Margin = 1: MXFP8 scales take no margin
	// <nil> E4M3 MXFP8 4
}

// The facts of a recipe that code storing its tensors needs.
func ExampleRecipe_ScaleType() {
	for _, r := range []fp8.Recipe{
		{Format: fp8.E4M3, Scaling: fp8.TensorCurrent},
		{Format: fp8.E4M3, Scaling: fp8.Block128x128},
		{Format: fp8.E4M3, Scaling: fp8.MXFP8},
	} {
		fmt.Printf("%v: %d data bytes, scales %v, local blocks %t, %d amax slots, %d block-scale bytes\n",
			r.Scaling, r.DataBytes(4096), r.ScaleType(), r.LocalBlocks(), r.AmaxSlots([]int{256, 16}), r.BlockScaleBytes(4096))
	}
	// Output:
	// TensorCurrent: 4096 data bytes, scales float32, local blocks false, 1 amax slots, 0 block-scale bytes
	// Block128x128: 4096 data bytes, scales float32, local blocks false, 2 amax slots, 0 block-scale bytes
	// MXFP8: 4096 data bytes, scales e8m0, local blocks true, 0 amax slots, 128 block-scale bytes
}
