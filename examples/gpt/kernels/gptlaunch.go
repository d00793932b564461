package kernels

import (
	"fmt"

	"github.com/distopt/distopt/cuda"
)

// The launch shapes of gptrows.cu, gptcols.cu and gpthead.cu; each constant
// mirrors a #define of the CUDA source.
const (
	colChunk  = 256 // COL_CHUNK: rows per block of the column reductions
	colGroups = 8   // COL_GROUPS: warps per block of the column reductions
	dyCols    = 128 // DY_COLS: columns per block of gpt_dy_cast
	embCols   = 128 // EMB_COLS: columns per block of gpt_embed_grad_tokens
	embWarps  = 32  // EMB_WARPS: warps per block of gpt_embed_grad_tokens
	headTile  = 128 // HT: output tile side of the head GEMMs
	headStep  = 16  // HK: summed-index step of the head GEMMs
)

// rowVariants are the register-resident row kernels of gptrows.cu: the
// kernel name's suffix and the longest row (in floats) it holds.
var rowVariants = []struct {
	suffix string
	n      int
}{{"_v4", 512}, {"_v8", 1024}, {"_v16", 2048}}

// rowVariant returns the suffix of the gptrows.cu kernel for rows of n
// floats whose float32 tensors start at f32 (16-byte aligned needed) and
// bfloat16 ones at bf (8 bytes), or "" (gpt.cu's any-shape kernel) when
// none fits. Zero pointers (absent outputs) fit.
func rowVariant(n int, f32, bf []cuda.DevicePtr) string {
	if n%4 != 0 {
		return ""
	}
	for _, p := range f32 {
		if p%16 != 0 {
			return ""
		}
	}
	for _, p := range bf {
		if p%8 != 0 {
			return ""
		}
	}
	for _, v := range rowVariants {
		if n <= v.n {
			return v.suffix
		}
	}
	return ""
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// gridFits reports an error when grid exceeds the device's limits (x below
// 2^31, y and z below 2^16).
func gridFits(name string, grid cuda.Dim3) error {
	if grid.X >= 1<<31 || grid.Y >= 1<<16 || grid.Z >= 1<<16 {
		return fmt.Errorf("kernels: %s: grid %d x %d x %d too large for the device", name, grid.X, grid.Y, grid.Z)
	}
	return nil
}

// launchGrid queues kernel name on grid with blocks of threads threads.
func (k *Set) launchGrid(s *cuda.Stream, name string, grid cuda.Dim3, threads int, args *cuda.Args) error {
	return s.Launch(k.function(name), grid, cuda.Dim3{X: uint32(threads)}, 0, args)
}

// columnSums queues a two-pass column reduction of rows x n (gptcols.cu):
// the partial kernel name with the arguments args(part) into the stream's
// scratch part, then gpt_column_sum_final into dst (and dst2, the second
// half of the partials, unless 0).
func (k *Set) columnSums(s *cuda.Stream, name string, dst, dst2 cuda.DevicePtr, rows, n int,
	args func(part cuda.DevicePtr) *cuda.Args) error {
	return k.columnSumsBy(s, name, 32, dst, dst2, rows, n, args)
}

// columnSumsBy is columnSums with blocks of cols columns (gpt_dy_cast's
// DY_COLS).
func (k *Set) columnSumsBy(s *cuda.Stream, name string, cols int, dst, dst2 cuda.DevicePtr, rows, n int,
	args func(part cuda.DevicePtr) *cuda.Args) error {
	if !checkLen(name, rows) || !checkLen(name, n) {
		return nil
	}
	chunks, halves := ceilDiv(rows, colChunk), 1
	if dst2 != 0 {
		halves = 2
	}
	grid := cuda.Dim3{X: uint32(ceilDiv(n, cols)), Y: uint32(chunks)}
	if err := gridFits(name, grid); err != nil {
		return err
	}
	part, err := k.scratch(s, 4*halves*chunks*n)
	if err != nil {
		return err
	}
	if err := k.launchGrid(s, name, grid, 32*colGroups, args(part)); err != nil {
		return err
	}
	return k.elementwise(s, kernelGPTColumnFinal, n, new(cuda.Args).Ptr(dst).Ptr(dst2).Ptr(part).
		U64(uint64(chunks)).U64(uint64(n)))
}

// headGEMM queues a head kernel of gpthead.cu over an output of m x n
// (tiles of headTile x headTile) in slices slices of the summed index.
func (k *Set) headGEMM(s *cuda.Stream, name string, n, m, slices int, args *cuda.Args) error {
	grid := cuda.Dim3{X: uint32(ceilDiv(n, headTile)), Y: uint32(ceilDiv(m, headTile)), Z: uint32(slices)}
	if err := gridFits(name, grid); err != nil {
		return err
	}
	return k.launchGrid(s, name, grid, 256, args)
}

// headSlices splits the rows summed by the weight gradient of the head
// (output out x in) into slices of slice rows, a multiple of the GEMM's
// step: enough slices for two blocks per multiprocessor, at most 16, each
// of at least 256 rows.
func (k *Set) headSlices(rows, in, out int) (slices, slice int) {
	tiles := ceilDiv(in, headTile) * ceilDiv(out, headTile)
	slices = min(ceilDiv(2*max(k.sms, 1), tiles), 16, ceilDiv(rows, 256))
	slices = max(slices, 1)
	slice = ceilDiv(ceilDiv(rows, slices), headStep) * headStep
	return ceilDiv(rows, slice), slice
}
