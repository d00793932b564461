package fp8grad

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/distopt/distopt/fp8"
)

// BenchmarkExchange compares, for one rank and one shard of n elements
// on d ranks, the codec work of the two exchanges (the network moves the
// same (d-1) pieces per rank in both):
//
//   - all-to-all: quantize the rank's d pieces, then dequantize and sum
//     the d received pieces in rank order (what Comm does);
//   - ring: quantize the rank's own piece, then d-2 hops of dequantize,
//     add the own piece in float32 and requantize, then a last dequantize
//     and add.
//
// Each reports ns per shard element and, as max-err/amax, the largest
// error of the reduced shard against the float64 sum over the ranks'
// gradients, relative to the largest magnitude of that sum: the ring
// quantizes partial sums d-1 times, the all-to-all each gradient once.
func BenchmarkExchange(b *testing.B) {
	const n, block = 1 << 16, DefaultBlock
	for _, d := range []int{2, 4, 8} {
		grads := make([][]float32, d) // rank s's gradient, all d pieces
		rng := rand.New(rand.NewPCG(1, uint64(d)))
		for s := range grads {
			grads[s] = make([]float32, d*n)
			for i := range grads[s] {
				grads[s][i] = float32(rng.NormFloat64())
			}
		}
		pb := PieceBytes(n, block)
		b.Run(fmt.Sprintf("all-to-all/d=%d", d), func(b *testing.B) {
			send := make([]byte, d*pb)
			out := make([]float32, n)
			pieces := make([][]byte, d)
			for b.Loop() {
				for p := range d {
					Quantize(send[p*pb:(p+1)*pb], grads[0][p*n:(p+1)*n], nil, block, fp8.E4M3)
				}
				for s := range d {
					pieces[s] = send[s*pb : (s+1)*pb] // stands for the received pieces
				}
				DequantSum(out, pieces, block, fp8.E4M3, 1)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/elem")
			b.ReportMetric(allToAllErr(grads, n, block), "max-err/amax")
		})
		b.Run(fmt.Sprintf("ring/d=%d", d), func(b *testing.B) {
			in, next := make([]byte, pb), make([]byte, pb)
			out := make([]float32, n)
			for b.Loop() {
				Quantize(in, grads[0][:n], nil, block, fp8.E4M3)
				for range d - 2 {
					ringHop(out, next, in, grads[0][:n], block)
					in, next = next, in
				}
				DequantSum(out, [][]byte{in}, block, fp8.E4M3, 1)
				for i, g := range grads[0][:n] {
					out[i] = float32(out[i] + g)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/elem")
			b.ReportMetric(ringErr(grads, n, block), "max-err/amax")
		})
	}
}

// ringHop dequantizes in, adds own in float32 (into tmp) and quantizes
// the result into out.
func ringHop(tmp []float32, out, in []byte, own []float32, block int) {
	DequantSum(tmp, [][]byte{in}, block, fp8.E4M3, 1)
	for i, g := range own {
		tmp[i] = float32(tmp[i] + g)
	}
	Quantize(out, tmp, nil, block, fp8.E4M3)
}

// allToAllErr is the relative error of shard 0 reduced by all-to-all.
func allToAllErr(grads [][]float32, n, block int) float64 {
	pieces := make([][]byte, len(grads))
	for s, g := range grads {
		pieces[s] = make([]byte, PieceBytes(n, block))
		Quantize(pieces[s], g[:n], nil, block, fp8.E4M3)
	}
	out := make([]float32, n)
	DequantSum(out, pieces, block, fp8.E4M3, 1)
	return relErr(out, grads, n)
}

// ringErr is the relative error of shard 0 reduced by the ring, the
// partial sum passing ranks 0, 1, ..., d-1.
func ringErr(grads [][]float32, n, block int) float64 {
	pb := PieceBytes(n, block)
	in, next := make([]byte, pb), make([]byte, pb)
	tmp := make([]float32, n)
	Quantize(in, grads[0][:n], nil, block, fp8.E4M3)
	for s := 1; s < len(grads)-1; s++ {
		ringHop(tmp, next, in, grads[s][:n], block)
		in, next = next, in
	}
	DequantSum(tmp, [][]byte{in}, block, fp8.E4M3, 1)
	for i, g := range grads[len(grads)-1][:n] {
		tmp[i] = float32(tmp[i] + g)
	}
	return relErr(tmp, grads, n)
}

// relErr is max |got - exact| / max |exact| over the first n elements.
func relErr(got []float32, grads [][]float32, n int) float64 {
	var maxErr, maxAbs float64
	for i := range n {
		var exact float64
		for _, g := range grads {
			exact += float64(g[i])
		}
		maxErr = max(maxErr, math.Abs(float64(got[i])-exact))
		maxAbs = max(maxAbs, math.Abs(exact))
	}
	return maxErr / maxAbs
}
