package optimizertest_test

import (
	"context"
	"fmt"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/collective/single"
	"github.com/distopt/distopt/optimizer/optimizertest"
)

// Two single-rank runs of the same configuration on the CPU backend, with
// different numbers of goroutines, hold bit-identical state.
func ExampleTrain() {
	params := optimizertest.AwkwardParams()
	cfg := optimizertest.Configs()["sgd"]
	train := func(goroutines int) optimizertest.Result {
		res, err := optimizertest.Train(context.Background(), single.New(buffer.Host, nil), cpu.New(goroutines), params, cfg, 3, optimizertest.RankGrad)
		if err != nil {
			panic(err)
		}
		return res
	}
	a, b := train(1), train(4)
	fmt.Println(a.Skipped(), optimizertest.Diff(a, b))
	// Output: [false false false] []
}
