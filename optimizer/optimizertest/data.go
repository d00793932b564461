package optimizertest

import (
	"math"
	"math/rand/v2"

	"github.com/distopt/distopt/bf16"
	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/optimizer"
)

// GradFunc returns rank's gradient of a parameter before step (counted
// from 0). It must return a new slice.
type GradFunc func(p optimizer.Param, step, rank int) []float32

// InitWeights returns NormalWeights(params, rand.New(rand.NewPCG(seed, 7))).
func InitWeights(params []optimizer.Param, seed uint64) map[string][]float32 {
	return NormalWeights(params, rand.New(rand.NewPCG(seed, 7)))
}

// NormalWeights returns initial values for params by name: float32 of
// r.NormFloat64()*0.05, drawn parameter by parameter in the order of params
// and element by element in row-major order.
func NormalWeights(params []optimizer.Param, r *rand.Rand) map[string][]float32 {
	m := map[string][]float32{}
	for _, p := range params {
		v := make([]float32, Numel(p.Shape))
		for i := range v {
			v[i] = float32(r.NormFloat64() * 0.05)
		}
		m[p.Name] = v
	}
	return m
}

// Grad returns a gradient of p drawn from rand.NewPCG(seed, len(p.Name)):
// element by element, k·2^-e with k uniform in [-64, 64] drawn first and e
// uniform in [8, 13], so that the values are exact in BFloat16 and a sum of
// a few is exact in float32. When step%3 == 2, element 0 is multiplied by
// 256: an outlier that makes clipping engage.
func Grad(p optimizer.Param, seed uint64, step int) []float32 {
	r := rand.New(rand.NewPCG(seed, uint64(len(p.Name))))
	g := make([]float32, Numel(p.Shape))
	for i := range g {
		g[i] = float32(r.IntN(129)-64) * float32(math.Ldexp(1, -8-r.IntN(6)))
		if step%3 == 2 && i == 0 {
			g[i] *= 256
		}
	}
	return g
}

// RankGrad is the GradFunc Grad(p, step*1000+rank, step): every rank has
// its own gradient.
func RankGrad(p optimizer.Param, step, rank int) []float32 {
	return Grad(p, uint64(step*1000+rank), step)
}

// MeanGrad is the reference all-reduce average of RankGrad over ranks 0 to
// world-1: Mean(dt, RankGrad(p, step, 0), ..., RankGrad(p, step, world-1)).
func MeanGrad(p optimizer.Param, step, world int, dt buffer.DType) []float32 {
	grads := make([][]float32, world)
	for r := range world {
		grads[r] = RankGrad(p, step, r)
	}
	return Mean(dt, grads...)
}

// Mean returns the average of grads as a communicator computes it in dt
// (buffer.Float32 or buffer.BFloat16): each gradient is rounded to
// dt (to nearest even), collective.Reduce averages them in dt, and the
// result is widened to float32. It panics on another dt, on no gradients,
// or on gradients of different lengths.
func Mean(dt buffer.DType, grads ...[]float32) []float32 {
	srcs := make([][]byte, len(grads))
	for r, g := range grads {
		srcs[r] = encode(g, dt)
	}
	dst := make([]byte, len(srcs[0]))
	collective.Reduce(dst, srcs, dt, collective.Avg)
	return decode(dst, dt)
}

// Round returns x rounded to dt (buffer.Float32: unchanged;
// buffer.BFloat16: to nearest even, as bf16.FromFloat32 rounds) and
// widened back to float32, in a new slice. It panics on another dt.
func Round(x []float32, dt buffer.DType) []float32 {
	return decode(encode(x, dt), dt)
}

// encode returns the little-endian bytes of x in dt.
func encode(x []float32, dt buffer.DType) []byte {
	switch dt {
	case buffer.Float32:
		return collective.ToBytes(x)
	case buffer.BFloat16:
		h := make([]uint16, len(x))
		for i, f := range x {
			h[i] = bf16.FromFloat32(f)
		}
		return collective.ToBytes(h)
	}
	panic("optimizertest: gradient type " + dt.String() + " is neither float32 nor bfloat16")
}

// decode is the inverse of encode, widening to float32.
func decode(b []byte, dt buffer.DType) []float32 {
	switch dt {
	case buffer.Float32:
		return collective.FromBytes[float32](b)
	case buffer.BFloat16:
		h := collective.FromBytes[uint16](b)
		x := make([]float32, len(h))
		for i, v := range h {
			x[i] = bf16.ToFloat32(v)
		}
		return x
	}
	panic("optimizertest: gradient type " + dt.String() + " is neither float32 nor bfloat16")
}
