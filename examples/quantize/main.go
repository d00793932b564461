// Command quantize casts a random 256x384 float32 matrix (fixed seed) with
// every fp8 recipe and both formats, reads it back, and prints the error
// against float32 and the bytes used (codes plus scales). The first column
// is the recipe's name as every distopt tool's -recipe flag takes it; with
// -recipe NAME only that recipe is shown.
//
//	go run ./examples/quantize -recipe Float8BlockScaling:E5M2
package main

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"

	"github.com/distopt/distopt/fp8"
)

func main() {
	only := flag.String("recipe", "", "show only this recipe (a name fp8.ParseRecipe reads, e.g. tile:E5M2)")
	helpToStdout(flag.CommandLine, os.Args[1:])
	flag.Parse()
	var want fp8.Recipe
	if *only != "" {
		var err error
		if want, err = fp8.ParseRecipe(*only); err != nil {
			fmt.Fprintln(os.Stderr, "quantize: -recipe:", err)
			os.Exit(2)
		}
	}
	const rows, cols = 256, 384
	r := rand.New(rand.NewPCG(1, 1))
	src := make([]float32, rows*cols)
	for i := range src {
		// Gaussian values whose magnitude grows by 2^32 down the rows, so
		// that per-tensor scales flush the small rows and blocks do not.
		src[i] = float32(r.NormFloat64() * math.Exp2(float64(i/cols)/8-16))
	}
	fmt.Printf("%dx%d float32 (%d bytes), amax %g\n", rows, cols, 4*len(src), fp8.Amax(src))
	fmt.Printf("%-13s %-6s %-14s %12s %12s %8s\n", "-recipe", "format", "scaling", "max abs err", "rms rel err", "bytes")
	back := make([]float32, len(src))
	for _, f := range []fp8.Format{fp8.E4M3, fp8.E5M2} {
		for _, s := range []fp8.Scaling{fp8.TensorCurrent, fp8.TensorDelayed, fp8.Block1x128, fp8.Block128x128, fp8.MXFP8} {
			rc := fp8.Recipe{Format: f, Scaling: s}
			if *only != "" && rc != want {
				continue
			}
			var h *fp8.AmaxHistory
			if s == fp8.TensorDelayed {
				// Warm the history with one cast, as step 2 of training
				// would find it.
				h = rc.NewHistory()
				h.Push(fp8.Amax(src))
			}
			t, err := fp8.Quantize(src, []int{rows, cols}, rc, h)
			if err == nil {
				err = t.Dequantize(back)
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "quantize:", err)
				os.Exit(1)
			}
			maxAbs, sumRel := 0.0, 0.0
			for i, x := range src {
				d := math.Abs(float64(back[i]) - float64(x))
				maxAbs = math.Max(maxAbs, d)
				sumRel += (d / math.Abs(float64(x))) * (d / math.Abs(float64(x)))
			}
			bytes := len(t.Data) + 4*len(t.ScaleInv)
			if s == fp8.MXFP8 {
				bytes = len(t.Data) + len(t.ScaleE8M0)
			}
			fmt.Printf("%-13s %-6v %-14v %12.3g %12.3g %8d\n", fp8.RecipeName(s)+":"+f.String(), f, s, maxAbs, math.Sqrt(sumRel/float64(len(src))), bytes)
		}
	}
}

// helpToStdout sends the usage that -h or -help asks for to stdout: it is
// the output asked for, not an error (flag writes it to stderr).
func helpToStdout(fs *flag.FlagSet, args []string) {
	if slices.ContainsFunc(args, func(a string) bool { a = strings.TrimLeft(a, "-"); return a == "h" || a == "help" }) {
		fs.SetOutput(os.Stdout)
	}
}
