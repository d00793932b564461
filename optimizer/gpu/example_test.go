package gpu_test

import (
	"context"
	"log"

	"github.com/distopt/distopt/collective/nccl"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/gpu"
)

// ExampleSetupFromEnv is one rank of a job started by the distopt launcher
// or torchrun: the backend and the communicator come from one call, on the
// GPU of LOCAL_RANK and ordered on its stream.
func ExampleSetupFromEnv() {
	ctx := context.Background()
	rank, err := gpu.SetupFromEnv(ctx, nccl.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer rank.Close()
	params := []optimizer.Param{{Name: "w", Shape: []int{1024, 1024}}}
	init := func(name string, offset int, dst []float32) error { return nil } // zeros
	o, err := optimizer.New(ctx, rank.Comm, rank.Backend, params, init, optimizer.Config{Store: rank.Store})
	if err != nil {
		log.Fatal(err)
	}
	defer o.Close()
	// ... write gradients into o.Grad views, call o.Step, read o.Param ...
}
