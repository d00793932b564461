// Command hfckpt saves a checkpoint of a small Llama-style model (two
// blocks, hidden 320, SwiGLU FFN 864, grouped-query attention with one KV
// head, vocabulary 1000: matrices of whole and partial 128 x 128 blocks)
// on 3 in-process ranks, for scripts/gpu/hf_export.sh to export. Each
// tensor's weights are Gaussian with its own standard deviation, and a few
// elements are large, so that blocks have different scales.
//
//	go run ./scripts/gpu/hfckpt -dir .gpu-hf/ckpt
package main

import (
	"context"
	"flag"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/checkpoint"
	"github.com/distopt/distopt/plan"
)

func main() {
	dir := flag.String("dir", "", "checkpoint root to write")
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "hfckpt: -dir is required")
		os.Exit(2)
	}
	if err := run(*dir); err != nil {
		fmt.Fprintln(os.Stderr, "hfckpt:", err)
		os.Exit(1)
	}
}

// initValues gives element i of tensor name a value that depends only on
// (name, i): Gaussian with a per-tensor deviation, every 997th element 30
// times larger.
func initValues(name string, offset int, dst []float32) error {
	h := fnv.New64a()
	h.Write([]byte(name))
	key := h.Sum64()
	std := 0.002 * float64(1+key%50)
	for i := range dst {
		r := rand.New(rand.NewPCG(key, uint64(offset+i)))
		v := r.NormFloat64() * std
		if (offset+i)%997 == 0 {
			v *= 30
		}
		dst[i] = float32(v)
	}
	return nil
}

func run(dir string) error {
	params := plan.LlamaConfig{Layers: 2, Hidden: 320, FFN: 864, Vocab: 1000, Heads: 5, KVHeads: 1}.Params()
	comms := inproc.Communicators(3)
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for r, comm := range comms {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			o, err := optimizer.New(ctx, comm, cpu.New(1), params, initValues, optimizer.Config{})
			if err == nil {
				_, err = checkpoint.Save(ctx, o, comm, dir, checkpoint.SaveOptions{})
				o.Close()
			}
			errs[r] = err
			comm.Close()
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			return fmt.Errorf("rank %d: %w", r, err)
		}
	}
	return nil
}
