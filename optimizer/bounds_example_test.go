package optimizer_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/cpu"
	"github.com/distopt/distopt/optimizer/optimizertest"
)

// New refuses a setting past a documented bound, here an Eps that is 0 in
// float32, and copies the LossScaler it is given: the value passed keeps
// its zero fields, and the optimizer's scale is read with LossScale.
func ExampleMinEps() {
	params := []optimizer.Param{{Name: "w", Shape: []int{4, 4}}}
	init := optimizer.FromMap(optimizertest.InitWeights(params, 1))
	comm := inproc.Communicators(1)[0]
	_, err := optimizer.New(context.Background(), comm, cpu.New(1), params, init, optimizer.Config{Eps: 1e-50})
	fmt.Println("Eps 1e-50 refused:", errors.Is(err, optimizer.ErrConfig))

	ls := &optimizer.LossScaler{}
	o, err := optimizer.New(context.Background(), comm, cpu.New(1), params, init, optimizer.Config{LossScaler: ls})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer o.Close()
	fmt.Println("optimizer's scale:", o.LossScale(), "value passed:", ls.InitScale)
	// Output:
	// Eps 1e-50 refused: true
	// optimizer's scale: 65536 value passed: 0
}
