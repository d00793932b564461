package backendtest

import (
	"encoding/binary"
	"math"
	"math/rand/v2"

	"github.com/distopt/distopt/bf16"
	"github.com/distopt/distopt/buffer"
)

// outside is the value of float32 elements outside every segment, and
// fillByte the byte of other buffers there: a backend that writes outside
// its segments changes them.
const (
	outside  = float32(12345.5)
	fillByte = 0xa5
)

// values returns n float32 of scale sigma with, when special, a sprinkling
// of zeros, subnormals, huge values, infinities and NaNs.
func values(r *rand.Rand, n int, sigma float64, special bool) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64() * sigma)
		if !special {
			continue
		}
		switch r.IntN(64) {
		case 0:
			x[i] = 0
		case 1:
			x[i] = math.Float32frombits(uint32(r.IntN(1 << 23))) // subnormal
		case 2:
			x[i] = float32(r.NormFloat64() * 1e30)
		case 3:
			x[i] = float32(math.Inf(1 - 2*r.IntN(2)))
		case 4:
			x[i] = math.Float32frombits(0x7fc00000 | uint32(r.IntN(1<<22)))
		}
	}
	return x
}

// zeroRuns sets random runs of 128 aligned elements of every slice to 0
// (blocks whose amax is 0).
func zeroRuns(r *rand.Rand, xs ...[]float32) {
	n := len(xs[0])
	for k := 0; k < n/2048; k++ {
		at := r.IntN(n/128) * 128
		for _, x := range xs {
			for i := at; i < min(at+128, n); i++ {
				x[i] = 0
			}
		}
	}
}

// encode stores x as dt (float32 or bfloat16, RNE), little endian.
func encode(x []float32, dt buffer.DType) []byte {
	switch dt {
	case buffer.BFloat16:
		b := make([]byte, 2*len(x))
		for i, v := range x {
			binary.LittleEndian.PutUint16(b[2*i:], bf16.FromFloat32(v))
		}
		return b
	default:
		b := make([]byte, 4*len(x))
		for i, v := range x {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
		return b
	}
}

// filled returns n bytes of fillByte.
func filled(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = fillByte
	}
	return b
}

// u32s encodes words little endian.
func u32s(w []uint32) []byte {
	b := make([]byte, 4*len(w))
	for i, v := range w {
		binary.LittleEndian.PutUint32(b[4*i:], v)
	}
	return b
}
