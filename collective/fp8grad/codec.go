package fp8grad

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync"

	"github.com/distopt/distopt/fp8"
)

// NaNBits is the float32 NaN that DequantSum writes for every NaN result.
const NaNBits uint32 = 0x7fc00000

// ScaleBytes is the size of one block's scale_inv on the wire.
const ScaleBytes = 4

// PieceBytes returns the size of the wire piece of n elements in blocks of
// block: ceil(n/block) float32 scale_invs, then n FP8 codes, then zero
// bytes up to a multiple of 4 (so that the scales of the next piece are
// aligned). It panics if n < 0 or block < 1.
func PieceBytes(n, block int) int {
	if n < 0 || block < 1 {
		panic(fmt.Sprintf("fp8grad: PieceBytes(%d, %d)", n, block))
	}
	return ScaleBytes*blocks(n, block) + (n+3)/4*4
}

// blocks returns ceil(n/block).
func blocks(n, block int) int { return (n + block - 1) / block }

// Quantize writes the wire piece of src to dst, which must hold
// PieceBytes(len(src), block) bytes. Each run k of block elements, the last
// maybe shorter, is coded so:
//
//	amax        = max |x| over the finite x of the run
//	scale, inv  = fp8.ScaleFromAmax(amax, f, 0, true)   (a power of two)
//	code[i]     = f.Encode(float32(x[i] * scale)), or f.NaN() (0x7f) if x[i] is NaN or ±Inf
//	scaleInv[k] = inv
//
// Decoding is exact, and a non-finite element decodes to NaN. For error
// feedback, residual holds len(src) values: x[i] is float32(src[i] +
// residual[i]), and residual[i] becomes float32(x[i] - decoded[i]), or 0 for
// a non-finite x[i]. With residual nil, x is src. See docs/DESIGN.md, "Note:
// FP8 gradient exchange".
func Quantize(dst []byte, src []float32, residual []float32, block int, f fp8.Format) {
	n := len(src)
	checkPiece("Quantize", len(dst), n, block, f)
	if residual != nil && len(residual) != n {
		panic("fp8grad: Quantize: residual length differs from src")
	}
	nb := blocks(n, block)
	codes := dst[ScaleBytes*nb : ScaleBytes*nb+n]
	clear(dst[ScaleBytes*nb+n : PieceBytes(n, block)])
	x := src
	if residual != nil {
		x = make([]float32, n)
		for i, v := range src {
			x[i] = float32(v + residual[i])
		}
	}
	inv := make([]float32, nb)
	fp8.CastBlocks1D(codes, inv, x, block, f, 0, true)
	for k := range nb {
		lo, hi := k*block, min((k+1)*block, n)
		if !finite(x[lo:hi]) {
			inv[k] = castNonFinite(codes[lo:hi], x[lo:hi], f)
		}
		binary.LittleEndian.PutUint32(dst[ScaleBytes*k:], math.Float32bits(inv[k]))
	}
	if residual == nil {
		return
	}
	dec := decodeTable(f)
	for i, v := range x {
		if math.Float32bits(v)&0x7fffffff < 0x7f800000 {
			residual[i] = float32(v - float32(dec[codes[i]]*inv[i/block]))
		} else {
			residual[i] = 0
		}
	}
}

// finite reports whether every element of x is finite.
func finite(x []float32) bool {
	for _, v := range x {
		if math.Float32bits(v)&0x7fffffff >= 0x7f800000 {
			return false
		}
	}
	return true
}

// castNonFinite casts a run that holds a NaN or an infinity: the scale
// from the finite elements' amax, the NaN code for the others. It returns
// the run's scale_inv.
func castNonFinite(codes []byte, x []float32, f fp8.Format) float32 {
	var amax uint32
	for _, v := range x {
		if a := math.Float32bits(v) & 0x7fffffff; a < 0x7f800000 {
			amax = max(amax, a)
		}
	}
	scale, inv := fp8.ScaleFromAmax(math.Float32frombits(amax), f, 0, true)
	fp8.CastScaled(codes, x, scale, f)
	for i, v := range x {
		if math.Float32bits(v)&0x7fffffff >= 0x7f800000 {
			codes[i] = f.NaN()
		}
	}
	return inv
}

// DequantSum writes to dst (n = len(dst) elements) the sum of the pieces
// (each of PieceBytes(n, block) bytes, quantized by Quantize with the same
// block and f), accumulated in float32 in the order of pieces, then
// divided by div:
//
//	acc    = dec(pieces[0], i)
//	acc    = float32(acc + dec(pieces[s], i))    for s = 1, 2, ...
//	dst[i] = float32(acc / div)
//
// where dec(p, i) = float32(f.Decode(code[i]) * scaleInv[i/block]) (exact,
// see Quantize; NaN for a non-finite element). Every multiply and add is a
// separate float32 operation (no fused multiply-add). div 1 leaves the sum
// as it is. Every NaN result is written as the NaN of bits NaNBits
// (NaN payloads and signs differ between CPUs and GPUs; this one does not).
func DequantSum(dst []float32, pieces [][]byte, block int, f fp8.Format, div float32) {
	n := len(dst)
	if len(pieces) == 0 {
		panic("fp8grad: DequantSum: no pieces")
	}
	for _, p := range pieces {
		checkPiece("DequantSum", len(p), n, block, f)
	}
	nb := blocks(n, block)
	dec := decodeTable(f)
	for k := range nb {
		lo, hi := k*block, min((k+1)*block, n)
		for s, p := range pieces {
			inv := math.Float32frombits(binary.LittleEndian.Uint32(p[ScaleBytes*k:]))
			codes := p[ScaleBytes*nb+lo : ScaleBytes*nb+hi]
			out := dst[lo:hi]
			if s == 0 {
				for i, c := range codes {
					out[i] = float32(dec[c] * inv)
				}
				continue
			}
			for i, c := range codes {
				out[i] = float32(out[i] + float32(dec[c]*inv))
			}
		}
		for i := lo; i < hi; i++ {
			if div != 1 {
				dst[i] = float32(dst[i] / div)
			}
			if dst[i] != dst[i] {
				dst[i] = math.Float32frombits(NaNBits) // one NaN on every machine
			}
		}
	}
}

// checkPiece panics if a piece of m bytes cannot hold n elements in blocks
// of block, or f is not a format.
func checkPiece(fn string, m, n, block int, f fp8.Format) {
	switch {
	case block < 1:
		panic(fmt.Sprintf("fp8grad: %s: block %d", fn, block))
	case !f.Valid():
		panic(fmt.Sprintf("fp8grad: %s: invalid format %v", fn, f))
	case m != PieceBytes(n, block):
		panic(fmt.Sprintf("fp8grad: %s: piece of %d bytes, want %d for %d elements", fn, m, PieceBytes(n, block), n))
	}
}

var decodeTables = [3]func() *[256]float32{
	fp8.E4M3: sync.OnceValue(func() *[256]float32 { return buildTable(fp8.E4M3) }),
	fp8.E5M2: sync.OnceValue(func() *[256]float32 { return buildTable(fp8.E5M2) }),
}

// decodeTable returns f.Decode of every code.
func decodeTable(f fp8.Format) *[256]float32 { return decodeTables[f]() }

func buildTable(f fp8.Format) *[256]float32 {
	var t [256]float32
	for c := range t {
		t[c] = f.Decode(uint8(c))
	}
	return &t
}
