package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"

	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/gemm"
	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/cudalink"
)

// shape is one linear layer: in -> out over tokens.
type shape struct {
	name            string
	tokens, in, out int
}

// recipe is how a benchmark quantizes weights and activations.
type recipe struct {
	name           string
	weight, act    gemm.Layout
	wFmt, xFmt, dy fp8.Format
}

var recipes = []recipe{
	{"per-tensor", gemm.PerTensor, gemm.PerTensor, fp8.E4M3, fp8.E4M3, fp8.E5M2},
	{"tiles128x128+rows1x128", gemm.Tiles128, gemm.Rows128, fp8.E4M3, fp8.E4M3, fp8.E5M2},
}

func main() {
	tokens := flag.Int("tokens", 16384, "tokens per batch (rows of the activations)")
	hidden := flag.Int("hidden", 2048, "hidden size")
	ffn := flag.Int("ffn", 8192, "FFN size")
	square := flag.Int("square", 8192, "side of the square product (0: none)")
	iters := flag.Int("iters", 20, "timed runs per product")
	warmup := flag.Int("warmup", 3, "untimed runs first")
	layers := flag.Int("layers", 24, "layers of the memory check (0: none)")
	tune := flag.Int("autotune", 0, "heuristic candidates timed per plan (gemm.Engine.SetAutotune; 0: the heuristic's first)")
	flag.Parse()
	runtime.LockOSThread()
	if err := run(*tokens, *hidden, *ffn, *square, *iters, *warmup, *layers, *tune); err != nil {
		fmt.Fprintln(os.Stderr, "distopt-bench-gemm:", err)
		os.Exit(1)
	}
}

func run(tokens, hidden, ffn, square, iters, warmup, layers, tune int) error {
	d, err := cuda.Open(0)
	if err != nil {
		return err
	}
	defer d.Close()
	s, err := d.NewStream()
	if err != nil {
		return err
	}
	defer s.Destroy()
	e, err := gemm.New(cudalink.PublicDevice(d), cudalink.PublicStream(s))
	if err != nil {
		return err
	}
	defer e.Close()
	e.SetAutotune(tune)
	fmt.Printf("# %v, %s, autotune %d\n\n", d.Info(), e.Library(), tune)
	shapes := []shape{{"qkv", tokens, hidden, 3 * hidden}, {"proj", tokens, hidden, hidden},
		{"fc1", tokens, hidden, ffn}, {"fc2", tokens, ffn, hidden}}
	if square > 0 {
		shapes = append(shapes, shape{"square", square, square, square})
	}
	b := &bench{d: d, s: s, e: e, iters: iters, warmup: warmup}
	fmt.Println("| shape | T x in -> out | recipe | product | ms | TFLOP/s |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, r := range recipes {
		for _, sh := range shapes {
			if err := b.layer(sh, r); err != nil {
				return err
			}
		}
	}
	if layers > 0 {
		return b.memory(shapes[:4], recipes, layers)
	}
	return nil
}
