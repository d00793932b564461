package optimizer_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/cpu"
)

// The gathered FP8 bytes of a parameter, read in place on the host, and
// decoded with the scale of its tensor. On a GPU backend, FP8DeviceBytes
// gives the pointer instead.
func ExampleOptimizer_FP8HostBytes() {
	ctx := context.Background()
	params := []optimizer.Param{{Name: "w", Shape: []int{2, 2}}}
	init := optimizer.FromMap(map[string][]float32{"w": {1, -0.5, 0.25, 2}})
	cfg := optimizer.Config{Recipe: fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent, PowerOf2: true}}
	o, err := optimizer.New(ctx, inproc.Communicators(1)[0], cpu.New(1), params, init, cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer o.Close()
	b, err := o.FP8HostBytes("w")
	if err != nil {
		fmt.Println(err)
		return
	}
	t, err := o.Tensor("w") // a copy, with the scale
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("bytes % x\n", b)
	vals := make([]float32, len(b))
	for i, x := range b {
		vals[i] = fp8.E4M3.Decode(x) * t.ScaleInv[0]
	}
	fmt.Println(strings.Trim(fmt.Sprint(vals), "[]"))
	_, err = o.FP8DeviceBytes("w")
	fmt.Println(err)
	// Output:
	// bytes 70 e8 60 78
	// 1 -0.5 0.25 2
	// optimizer: FP8 bytes of "w" are in host memory; use FP8HostBytes: collective: wrong memory kind
}
