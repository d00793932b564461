package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/internal/cuda/cudatest"
)

// TestAccumulateGrad compares AccumulateGrad with collective.Reduce (Sum)
// of the same two operands, in both variants, on vector and misaligned
// (scalar) paths with guard bands: bfloat16 bit for bit over every
// bfloat16 source against a set of destinations (zeros, one, the largest
// finite values, the smallest subnormal, Inf, NaN) and over random pairs
// of any bits; float32 bit for bit over random pairs of any bits, a NaN
// sum needing only to be a NaN (the GPU's payload is its own).
func TestAccumulateGrad(t *testing.T) {
	d, sets := loadAll(t)
	s := cudatest.Stream(t, d)
	rng := rand.New(rand.NewPCG(7, 11))
	dsts := []uint16{0, 0x8000, 0x3f80, 0x7f7f, 0xff7f, 0x0001, 0x7f80, 0x7fc1}
	bfSrc, bfDst := make([]byte, 0, 2*(65536*len(dsts)+100003)), make([]byte, 0, 2*(65536*len(dsts)+100003))
	for _, dv := range dsts {
		for x := range 65536 {
			bfSrc = binary.LittleEndian.AppendUint16(bfSrc, uint16(x))
			bfDst = binary.LittleEndian.AppendUint16(bfDst, dv)
		}
	}
	for range 100003 {
		bfSrc = binary.LittleEndian.AppendUint16(bfSrc, uint16(rng.Uint32()))
		bfDst = binary.LittleEndian.AppendUint16(bfDst, uint16(rng.Uint32()))
	}
	f32Src, f32Dst := make([]byte, 4*100003), make([]byte, 4*100003)
	for i := range 100003 {
		binary.LittleEndian.PutUint32(f32Src[4*i:], rng.Uint32())
		binary.LittleEndian.PutUint32(f32Dst[4*i:], rng.Uint32())
	}
	for _, k := range sets {
		for _, c := range []struct {
			dt       buffer.DType
			src, dst []byte
			offs     []int
		}{
			{buffer.BFloat16, bfSrc, bfDst, []int{0, 2, 6}},
			{buffer.Float32, f32Src, f32Dst, []int{0, 4, 12}},
		} {
			for _, off := range c.offs {
				t.Run(fmt.Sprintf("%v/%v/offset=%d", k.v, c.dt, off), func(t *testing.T) {
					n := len(c.src) / c.dt.Size()
					src, dst := newGuarded(t, d, s, len(c.src), off), newGuarded(t, d, s, len(c.dst), off)
					must(t, s.Upload(src.ptr(), c.src))
					must(t, s.Upload(dst.ptr(), c.dst))
					must(t, k.AccumulateGrad(s, dst.ptr(), src.ptr(), n, c.dt == buffer.BFloat16))
					got := dst.read(t, s)
					want := make([]byte, len(c.dst))
					collective.Reduce(want, [][]byte{c.src, c.dst}, c.dt, collective.Sum)
					for i := range n {
						if c.dt == buffer.BFloat16 {
							g, w := binary.LittleEndian.Uint16(got[2*i:]), binary.LittleEndian.Uint16(want[2*i:])
							if g != w {
								t.Fatalf("[%d] %#04x + %#04x: gpu %#04x, collective.Reduce %#04x", i,
									binary.LittleEndian.Uint16(c.src[2*i:]), binary.LittleEndian.Uint16(c.dst[2*i:]), g, w)
							}
							continue
						}
						g, w := binary.LittleEndian.Uint32(got[4*i:]), binary.LittleEndian.Uint32(want[4*i:])
						gf, wf := math.Float32frombits(g), math.Float32frombits(w)
						if g != w && !(math.IsNaN(float64(gf)) && math.IsNaN(float64(wf))) {
							t.Fatalf("[%d] %#08x + %#08x: gpu %#08x, collective.Reduce %#08x", i,
								binary.LittleEndian.Uint32(c.src[4*i:]), binary.LittleEndian.Uint32(c.dst[4*i:]), g, w)
						}
					}
				})
			}
		}
	}
}
