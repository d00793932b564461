package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/cuda/cudatest"
	"github.com/distopt/distopt/fp8"
)

// BenchmarkDYCast times GPTDYCast (the output gradients' one-pass cast,
// transpose and bias sums: the profile's "quantize" phase) on a bfloat16
// dy spread like the model's, at the shapes of examples/gpt's linear
// layers: 124M at 16 x 1024 tokens (widths 768, 2304, 3072) and 1.3B at
// 4 x 2048 (2048, 6144, 8192). GB/s counts the bytes each element moves
// at least (2 read, 1 + 1 written); BenchmarkGPT/copy in the same run is
// the floor's bandwidth.
func BenchmarkDYCast(b *testing.B) {
	d := cudatest.Require(b)
	k, err := Load(d)
	must(b, err)
	b.Cleanup(func() { k.Close() })
	g := &gptBench{s: cudatest.Stream(b, d), k: k}
	e := &fusedEnv{t: b, d: d, s: g.s, r: rand.New(rand.NewPCG(7, 5))}
	scale := cudatest.Alloc(b, d, 4)
	must(b, g.s.Upload(scale, cuda.Bytes([]float32{1024})))
	for _, sh := range [][2]int{{16384, 768}, {16384, 2304}, {16384, 3072}, {8192, 2048}, {8192, 6144}, {8192, 8192}} {
		rows, n := sh[0], sh[1]
		dy := e.bf(rows*n, 0, 1e-3)
		codes, codesT, db := cudatest.Alloc(b, d, rows*n), cudatest.Alloc(b, d, rows*n), cudatest.Alloc(b, d, 4*n)
		b.Run(fmt.Sprintf("%dx%d", rows, n), func(b *testing.B) {
			gptTime(b, g, 4*rows*n, 0, func() error {
				return k.GPTDYCast(g.s, codes, codesT, db, dy, scale, rows, n, fp8.E5M2, true)
			})
		})
	}
}
