package model

import (
	"hash/fnv"
	"math"
	"runtime"
	"strings"
	"sync"

	"github.com/distopt/distopt/examples/gpt/data"
	"github.com/distopt/distopt/optimizer"
)

// Init returns the initial values of the parameters (GPT-2's): LayerNorm
// weights 1, biases 0, the rest normal with standard deviation 0.02, the
// residual projections (attn.proj and mlp.proj weights) 0.02/sqrt(2 x
// Layers). Element i of a parameter is std x N(key, i), where key is the
// FNV-1a hash of the name and N a Box-Muller normal of two SplitMix64
// draws: every rank and every shard computes the same values.
func (c Config) Init() optimizer.InitFunc {
	return func(name string, offset int, dst []float32) error {
		switch {
		case strings.HasSuffix(name, "ln1.weight") || strings.HasSuffix(name, "ln2.weight") || name == "final_ln.weight":
			for i := range dst {
				dst[i] = 1
			}
			return nil
		case strings.HasSuffix(name, ".bias"):
			clear(dst)
			return nil
		}
		std := 0.02
		if strings.HasSuffix(name, "attn.proj.weight") || strings.HasSuffix(name, "mlp.proj.weight") {
			std /= math.Sqrt(2 * float64(c.Layers))
		}
		h := fnv.New64a()
		h.Write([]byte(name))
		key := h.Sum64()
		fillNormal(dst, key, offset, std)
		return nil
	}
}

// initChunk is the number of elements one goroutine of fillNormal draws:
// large enough that starting it costs nothing against its work.
const initChunk = 1 << 20

// fillNormal sets dst[i] = std x normal(key, offset+i), in chunks spread
// over the CPUs (each element depends only on its index, so the values do
// not depend on the split): the 1.3B shape's 1.4G draws take about a minute
// on one core.
func fillNormal(dst []float32, key uint64, offset int, std float64) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for lo := 0; lo < len(dst); lo += initChunk {
		hi := min(lo+initChunk, len(dst))
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			for i := lo; i < hi; i++ {
				dst[i] = float32(std * normal(key, uint64(offset+i)))
			}
		})
	}
	wg.Wait()
}

// normal is a standard normal sample that depends only on (key, i).
func normal(key, i uint64) float64 {
	a := data.SplitMix64(key ^ (i * 0x9e3779b97f4a7c15))
	b := data.SplitMix64(a)
	u1 := (float64(a>>11) + 0.5) / (1 << 53)
	u2 := float64(b>>11) / (1 << 53)
	return math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
}
