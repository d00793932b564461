package main

import (
	"encoding/binary"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/plan"
)

// The model is plan.GPTConfig's parameter set: token and position
// embeddings, Layers blocks of (LayerNorm, QKV, attention output,
// LayerNorm, MLP up and down, with biases), a final LayerNorm and an untied
// head. Norms and biases are high-precision parameters.

// paramLayer returns the block index of a GPTConfig parameter name
// ("layer7.mlp.up.weight" gives 7), -1 for the embeddings and len(layers)
// for the final norm and the head.
func paramLayer(name string, layers int) int {
	if rest, ok := strings.CutPrefix(name, "layer"); ok {
		if i := strings.IndexByte(rest, '.'); i > 0 {
			if l, err := strconv.Atoi(rest[:i]); err == nil {
				return l
			}
		}
	}
	if strings.HasPrefix(name, "embed.") {
		return -1
	}
	return layers
}

// initValues is the InitFunc of the example, the same on every rank:
// LayerNorm weights 1, biases 0, matrices and embeddings Gaussian with
// standard deviation 0.02 (GPT-2's), the residual projections (attention
// output, MLP down) scaled by 1/sqrt(2 x layers). Element i of a tensor is
// a pure function of the tensor's name and i, so any piece of it can be
// made on its own.
func initValues(layers int) optimizer.InitFunc {
	return func(name string, offset int, dst []float32) error {
		switch {
		case strings.Contains(name, "ln") && strings.HasSuffix(name, ".weight"):
			for i := range dst {
				dst[i] = 1
			}
			return nil
		case strings.HasSuffix(name, ".bias"):
			clear(dst)
			return nil
		}
		std := 0.02
		if strings.HasSuffix(name, "attn.out.weight") || strings.HasSuffix(name, "mlp.down.weight") {
			std /= math.Sqrt(2 * float64(layers))
		}
		h := fnv.New64a()
		h.Write([]byte(name))
		key := h.Sum64()
		var wg sync.WaitGroup
		for lo := 0; lo < len(dst); lo += chunk { // large pieces in parallel
			part := dst[lo:min(len(dst), lo+chunk)]
			wg.Go(func() {
				for i := range part {
					part[i] = float32(std * hashNormal(key, uint64(offset+lo+i)))
				}
			})
		}
		wg.Wait()
		return nil
	}
}

// hashNormal is a standard normal sample that depends only on (key, i):
// Box-Muller over two uniforms from SplitMix64 of the pair.
func hashNormal(key, i uint64) float64 {
	a := splitMix64(key ^ (i * 0x9e3779b97f4a7c15))
	b := splitMix64(a)
	u1 := (float64(a>>11) + 0.5) / (1 << 53) // in (0, 1)
	u2 := float64(b>>11) / (1 << 53)
	return math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
}

func splitMix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// gradModel makes the synthetic gradients, shaped and scaled like those of
// a backward pass through the model on one rank's micro-batch:
//
//   - a weight matrix of fan-in k gets independent N(0, s^2) entries with
//     s = Scale * f / sqrt(k), where f = Decay^(L-1-l) for block l of L
//     (gradients shrink going back from the loss), 1 for the head and the
//     final norm, Decay^L for the embeddings;
//   - biases get s = Scale * f / sqrt(hidden); LayerNorm weights and
//     biases a tenth of that;
//   - the position embedding is dense (every position is used);
//   - the token embedding is sparse by rows: the micro-batch holds Tokens
//     tokens drawn from a Zipf(1.1) distribution over the vocabulary; a row
//     that occurs c times gets s = Scale * f * sqrt(c * V / Tokens) /
//     sqrt(hidden) (with a uniform draw this matches a dense matrix), and
//     rows that do not occur are exactly zero.
//
// Every rank draws its own micro-batch and noise (seeded by rank and
// slot), so the averaged gradient is smaller than one rank's, as in data
// parallel training.
type gradModel struct {
	GPT    plan.GPTConfig
	Scale  float64
	Decay  float64
	Tokens int
	DType  buffer.DType // BFloat16 or Float32
}

// std returns the standard deviation of the elements of p's gradient (of
// a row occurring once per V/Tokens tokens, for the token embedding).
func (m gradModel) std(p optimizer.Param) float64 {
	L := m.GPT.Layers
	f := math.Pow(m.Decay, float64(L-1-paramLayer(p.Name, L)))
	if paramLayer(p.Name, L) >= L {
		f = 1
	}
	h := math.Sqrt(float64(m.GPT.Hidden))
	switch {
	case strings.Contains(p.Name, "ln"):
		return m.Scale * f / h / 10
	case p.HighPrecision: // biases
		return m.Scale * f / h
	case strings.HasPrefix(p.Name, "embed."):
		return m.Scale * f / h
	}
	return m.Scale * f / math.Sqrt(float64(p.Shape[len(p.Shape)-1]))
}

// tokenCounts draws the micro-batch's tokens and counts each row.
func (m gradModel) tokenCounts(seed uint64) []int32 {
	r := rand.New(rand.NewPCG(seed, 0x70c))
	z := rand.NewZipf(r, 1.1, 1, uint64(m.GPT.Vocab-1))
	c := make([]int32, m.GPT.Vocab)
	for range m.Tokens {
		c[z.Uint64()]++
	}
	return c
}

// chunk is the unit of parallel generation, in elements: each chunk has
// its own random stream, so the result does not depend on the workers.
const chunk = 1 << 20

// generate returns one gradient per parameter, encoded as m.DType, for the
// given seed, made by workers goroutines (GOMAXPROCS when < 1).
func (m gradModel) generate(params []optimizer.Param, seed uint64, workers int) [][]byte {
	if workers < 1 {
		workers = runtime.GOMAXPROCS(0)
	}
	counts := m.tokenCounts(seed)
	type task struct{ p, c int }
	var tasks []task
	out := make([][]byte, len(params))
	for i, p := range params {
		n := numElements(p.Shape)
		out[i] = make([]byte, n*m.DType.Size())
		for c := 0; c*chunk < n; c++ {
			tasks = append(tasks, task{i, c})
		}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				k := int(next.Add(1)) - 1
				if k >= len(tasks) {
					return
				}
				t := tasks[k]
				m.fill(out[t.p], params[t.p], t.c, rand.New(rand.NewPCG(seed, uint64(t.p)<<32|uint64(t.c))), counts)
			}
		})
	}
	wg.Wait()
	return out
}

// fill writes chunk c of p's gradient into dst.
func (m gradModel) fill(dst []byte, p optimizer.Param, c int, r *rand.Rand, counts []int32) {
	n := numElements(p.Shape)
	lo, hi := c*chunk, min(n, (c+1)*chunk)
	std := m.std(p)
	sparse := p.Name == "embed.tokens"
	rowScale := float64(m.GPT.Vocab) / float64(max(1, m.Tokens))
	cols := p.Shape[len(p.Shape)-1]
	for i := lo; i < hi; i++ {
		s := std
		if sparse {
			s *= math.Sqrt(float64(counts[i/cols]) * rowScale)
		}
		var x float32
		if s != 0 {
			x = float32(s * r.NormFloat64())
		}
		if m.DType == buffer.Float32 {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(x))
		} else {
			binary.LittleEndian.PutUint16(dst[2*i:], fp8.BF16FromFloat32(x))
		}
	}
}

// expectedSquare is the expected sum of squares of one rank's gradient
// over all parameters (the token embedding with its expected row counts
// taken as Tokens/V each: E[c] summed over rows is Tokens either way).
func (m gradModel) expectedSquare(params []optimizer.Param) float64 {
	var s float64
	for _, p := range params {
		sd := m.std(p)
		s += float64(numElements(p.Shape)) * sd * sd
	}
	return s
}

func numElements(shape []int) int {
	n := 1
	for _, s := range shape {
		n *= s
	}
	return n
}
