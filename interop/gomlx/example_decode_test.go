package gomlxinterop_test

import (
	"fmt"

	"github.com/distopt/distopt/fp8"
	gomlxinterop "github.com/distopt/distopt/interop/gomlx"
	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// A graph decodes E4M3 codes with their per-tensor scale_inv, exactly as
// fp8.Decode(code) x scale_inv: 0x38 is 1, 0x40 is 2, 0xc0 is -2, 0x7e
// is 448.
func ExampleDecodeFP8() {
	be, err := simplego.New("")
	if err != nil {
		fmt.Println(err)
		return
	}
	r := fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}
	exec, err := graph.NewExec(be, func(codes, scaleInv *graph.Node) *graph.Node {
		out, err := gomlxinterop.DecodeFP8(codes, scaleInv, []int{2, 2}, r)
		if err != nil {
			panic(err)
		}
		return out
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	out, err := exec.Exec(tensors.FromFlatDataAndDimensions([]uint8{0x38, 0x40, 0xc0, 0x7e}, 2, 2), []float32{0.25})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(tensors.MustCopyFlatData[float32](out[0]))
	// Output: [0.25 0.5 -0.5 112]
}
