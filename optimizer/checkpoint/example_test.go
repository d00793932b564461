package checkpoint_test

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sync"

	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/checkpoint"
)

// onRanks runs fn on n in-process ranks at once and stops at the first error.
func onRanks(n int, fn func(ctx context.Context, comm collective.Communicator) error) {
	comms := inproc.Communicators(n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r, comm := range comms {
		wg.Go(func() { errs[r] = fn(context.Background(), comm) })
	}
	wg.Wait()
	for _, c := range comms {
		c.Close()
	}
	for _, err := range errs {
		if err != nil {
			log.Fatal(err)
		}
	}
}

// Saves on two ranks after three steps, then resumes on three ranks.
func Example() {
	params := []optimizer.Param{{Name: "w", Shape: []int{64, 48}}, {Name: "b", Shape: []int{48}, HighPrecision: true}}
	initial := map[string][]float32{"w": make([]float32, 64*48), "b": make([]float32, 48)}
	for i := range initial["w"] {
		initial["w"][i] = float32(i%17-8) / 64
	}
	root, err := os.MkdirTemp("", "distopt-checkpoint")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(root)

	var saved []byte // the FP8 bytes of w when saved
	onRanks(2, func(ctx context.Context, comm collective.Communicator) error {
		o, err := optimizer.New(ctx, comm, cpu.New(1), params, optimizer.FromMap(initial), optimizer.Config{})
		if err != nil {
			return err
		}
		defer o.Close()
		for step := range 3 {
			for _, p := range params {
				g := make([]float32, len(initial[p.Name]))
				for i := range g {
					g[i] = float32((i+step)%5-2) / 256
				}
				if err := o.SetGrad(p.Name, g); err != nil {
					return err
				}
			}
			if _, err := o.Step(ctx); err != nil {
				return err
			}
		}
		info, err := checkpoint.Save(ctx, o, comm, root, checkpoint.SaveOptions{})
		if err != nil {
			return err
		}
		if comm.Rank() == 0 {
			t, _ := o.Tensor("w")
			saved = t.Data
			fmt.Printf("saved step %d from %d ranks\n", info.Step, info.World)
		}
		return nil
	})

	latest, err := checkpoint.Latest(root)
	if err != nil {
		log.Fatal(err)
	}
	info, err := checkpoint.Verify(latest) // every byte, offline
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("latest is %s, verified: step %d, %d shard files\n", filepath.Base(latest), info.Step, info.World)

	onRanks(3, func(ctx context.Context, comm collective.Communicator) error {
		zeros := optimizer.FromMap(map[string][]float32{"w": make([]float32, 64*48), "b": make([]float32, 48)})
		o, err := optimizer.New(ctx, comm, cpu.New(1), params, zeros, optimizer.Config{})
		if err != nil {
			return err
		}
		defer o.Close()
		if _, err := checkpoint.Load(ctx, o, comm, root, checkpoint.LoadOptions{}); err != nil {
			return err
		}
		if comm.Rank() == 2 {
			t, _ := o.Tensor("w")
			fmt.Printf("rank 2 of 3 resumed at step %d, FP8 weights as saved: %t\n", o.StepCount(), bytes.Equal(t.Data, saved))
		}
		return nil
	})
	// Output:
	// saved step 3 from 2 ranks
	// latest is step-00000003, verified: step 3, 2 shard files
	// rank 2 of 3 resumed at step 3, FP8 weights as saved: true
}
