package gomlxinterop_test

import (
	"fmt"

	gomlxinterop "github.com/distopt/distopt/interop/gomlx"
	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// Differentiating y = sum(x·w) (DotGeneral, as Dense and Einsum build
// it) with matrix products: the gradient of w is xᵀ·1, the column sums of
// x; of x, the row sums of w, per row.
func ExampleUseDotGeneralGradient() {
	restore := gomlxinterop.UseDotGeneralGradient()
	defer restore()
	be, err := simplego.New("")
	if err != nil {
		fmt.Println(err)
		return
	}
	exec, err := graph.NewExec(be, func(x, w *graph.Node) []*graph.Node {
		return graph.Gradient(graph.ReduceAllSum(graph.DotGeneral(x, []int{1}, nil, w, []int{0}, nil)), x, w)
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	x := tensors.FromFlatDataAndDimensions([]float32{1, 2, 3, 4}, 2, 2)
	w := tensors.FromFlatDataAndDimensions([]float32{1, 0, 5, 1}, 2, 2)
	out, err := exec.Exec(x, w)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(tensors.MustCopyFlatData[float32](out[0]), tensors.MustCopyFlatData[float32](out[1]))
	// Output: [1 6 1 6] [4 4 6 6]
}
