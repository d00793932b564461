package kernels

import (
	"errors"
	"fmt"

	"github.com/distopt/distopt/internal/cuda"
)

// The kernels of flash.cu: fused causal attention (FlashAttention-2) on
// the tensor cores, bfloat16 q, k, v and output gradient, float32
// accumulation and softmax statistics. The forward pass keeps the output
// and the per-row logsumexp; the backward pass recomputes the
// probabilities tile by tile in two kernels with fixed summation orders
// (dK and dV per key tile, dQ per query tile), so results repeat bit for
// bit. Fragments come from shared memory through ldmatrix (flashLoads).
const (
	kernelFlashFwd64   = "flash_fwd_d64"
	kernelFlashFwd128  = "flash_fwd_d128"
	kernelFlashPrep    = "flash_bwd_prep"
	kernelFlashDKDV64  = "flash_bwd_dkdv_d64"
	kernelFlashDKDV128 = "flash_bwd_dkdv_d128"
	kernelFlashDQ64    = "flash_bwd_dq_d64"
	kernelFlashDQ128   = "flash_bwd_dq_d128"
)

// flashLoads is how the tile kernels load their tensor-core fragments
// from shared memory; every kernel but flash_bwd_prep exists in both ways,
// which give the same bits.
type flashLoads int

const (
	flashLdmatrix flashLoads = iota // ldmatrix.x4 (the launchers' choice)
	flashLDS                        // 32- and 16-bit shared loads (kernel name + "_lds")
)

// flashDefaultLoads is the loading the exported launchers use.
const flashDefaultLoads = flashLdmatrix

// kernel returns the name of a tile kernel in loading l.
func (l flashLoads) kernel(name string) string {
	if l == flashLDS {
		return name + "_lds"
	}
	return name
}

func (l flashLoads) String() string { return [...]string{"ldmatrix", "lds"}[l] }

// flashKernels lists the kernels of flash.cu.
func flashKernels() []string {
	names := []string{kernelFlashPrep}
	for _, l := range []flashLoads{flashLdmatrix, flashLDS} {
		for _, n := range []string{kernelFlashFwd64, kernelFlashFwd128, kernelFlashDKDV64, kernelFlashDKDV128, kernelFlashDQ64, kernelFlashDQ128} {
			names = append(names, l.kernel(n))
		}
	}
	return names
}

// Tiles of flash.cu: 64 rows per block (4 warps of 16), and the query rows
// per step of the dK/dV kernel's loop.
const (
	flashThreads = 128
	flashRows    = 64
)

// flashDKDVQuery returns the query rows per step of the dK/dV kernel (32
// for D = 128, so that its accumulators fit the registers).
func flashDKDVQuery(d int) int {
	if d == 128 {
		return 32
	}
	return 64
}

// Dynamic shared memory of the flash kernels in bytes (see flash.cu).
func flashFwdShared(d int) int  { return 3 * flashRows * d * 2 }
func flashDQShared(d int) int   { return 4 * flashRows * d * 2 }
func flashDKDVShared(d int) int { bq := flashDKDVQuery(d); return (2*flashRows+2*bq)*d*2 + 2*bq*4 }

// ErrFlashShape is returned for shapes the flash kernels do not take.
var ErrFlashShape = errors.New("kernels: flash attention shape")

// FlashShape is the shape of one attention call: Batch x Heads heads of
// width D (64 or 128) over Seq tokens.
type FlashShape struct {
	Batch, Heads, Seq, D int
}

// Rows returns batch·heads·seq, the number of rows of the packed tensors
// and of the per-row statistics.
func (sh FlashShape) Rows() int { return sh.Batch * sh.Heads * sh.Seq }

// Check returns an error matching ErrFlashShape when the kernels cannot
// run sh.
func (sh FlashShape) Check() error {
	if sh.Batch < 1 || sh.Heads < 1 || sh.Seq < 1 || (sh.D != 64 && sh.D != 128) {
		return fmt.Errorf("%w: %+v: sizes must be positive and D 64 or 128", ErrFlashShape, sh)
	}
	if sh.Batch*sh.Heads >= 1<<16 || sh.Seq >= 1<<30 {
		return fmt.Errorf("%w: %+v: batch·heads must be below 65536 and seq below 2^30", ErrFlashShape, sh)
	}
	return nil
}

// FlashRows places a float32 tensor of a FlashShape in memory: head k of
// token (b, t) at Ptr + 4·((b·Seq + t)·LD + k·D), D elements. LD = Heads·D
// is a row-major [batch·seq, heads·D] matrix; the model's qkv activation
// holds q, k, v at Ptr, Ptr + 4h, Ptr + 8h with LD = 3h.
type FlashRows struct {
	Ptr cuda.DevicePtr
	LD  int
}

// check refuses rows the kernels cannot address: LD below Heads·D, odd,
// or Ptr not 8-byte aligned (two floats are stored at a time).
func (r FlashRows) check(name string, sh FlashShape) error {
	if r.LD < sh.Heads*sh.D || r.LD%2 != 0 || r.Ptr%8 != 0 {
		return fmt.Errorf("%w: %s at %#x with LD %d: LD must be even and at least heads·D = %d, the address 8-byte aligned",
			ErrFlashShape, name, uint64(r.Ptr), r.LD, sh.Heads*sh.D)
	}
	return nil
}

// checkPacked refuses packed bfloat16 tensors that are not 16-byte aligned.
func checkPacked(names string, ps ...cuda.DevicePtr) error {
	for _, p := range ps {
		if p%16 != 0 {
			return fmt.Errorf("%w: packed bfloat16 tensor (%s) at %#x is not 16-byte aligned", ErrFlashShape, names, uint64(p))
		}
	}
	return nil
}

// flashName picks the kernel of head width d.
func flashName(d int, d64, d128 string) string {
	if d == 128 {
		return d128
	}
	return d64
}

// flashLaunch queues a tile kernel: grid (ceil(seq/64), batch·heads), 128
// threads, shared bytes of dynamic shared memory (the kernel's limit
// raised to it first).
func (k *Set) flashLaunch(s *cuda.Stream, name string, sh FlashShape, shared int, args *cuda.Args) error {
	f := k.function(name)
	if err := f.SetAttribute(cuda.FuncMaxDynamicSharedSizeBytes, shared); err != nil {
		return fmt.Errorf("kernels: %s: %w", name, err)
	}
	grid := cuda.Dim3{X: uint32((sh.Seq + flashRows - 1) / flashRows), Y: uint32(sh.Batch * sh.Heads)}
	return s.Launch(f, grid, cuda.Dim3{X: flashThreads}, shared, args)
}

// FlashForward queues causal attention of shape sh with score scale
// `scale` on the packed bfloat16 q, k, v [batch·heads, seq, D] (16-byte
// aligned): for every head and query row i, with s_j = scale·q_i·k_j over
// the keys j ≤ i,
//
//	lse[bh·seq + i] = log Σ_{j≤i} exp(s_j)        (float32, natural log)
//	o_i = Σ_{j≤i} exp(s_j - lse_i)·v_j             (float32, into o)
//
// and o16 (if not 0) receives o rounded to bfloat16, packed like q, which
// FlashBackward reads. Products in bfloat16 with float32 accumulation: the
// probabilities are rounded to bfloat16 before they multiply v.
func (k *Set) FlashForward(s *cuda.Stream, o FlashRows, o16, lse, q, kk, v cuda.DevicePtr, sh FlashShape, scale float32) error {
	return k.flashForward(s, o, o16, lse, q, kk, v, sh, scale, flashDefaultLoads)
}

// flashForward is FlashForward with the fragment loading l.
func (k *Set) flashForward(s *cuda.Stream, o FlashRows, o16, lse, q, kk, v cuda.DevicePtr, sh FlashShape, scale float32, l flashLoads) error {
	if err := errors.Join(sh.Check(), o.check("o", sh), checkPacked("q, k, v, o16", q, kk, v, o16)); err != nil {
		return err
	}
	return k.flashLaunch(s, l.kernel(flashName(sh.D, kernelFlashFwd64, kernelFlashFwd128)), sh, flashFwdShared(sh.D),
		new(cuda.Args).Ptr(o.Ptr).U64(uint64(o.LD)).Ptr(o16).Ptr(lse).Ptr(q).Ptr(kk).Ptr(v).
			U32(uint32(sh.Heads)).U32(uint32(sh.Seq)).F32(scale))
}

// FlashGrads are the outputs of FlashBackward, float32, overwritten.
type FlashGrads struct {
	DQ, DK, DV FlashRows
}

// FlashScratch is FlashBackward's scratch: DO16 the bfloat16 output
// gradient, packed (2·Rows·D bytes, 16-byte aligned), and DSum the per-row
// dot products of the output and its gradient (4·Rows bytes).
type FlashScratch struct {
	DO16, DSum cuda.DevicePtr
}

// FlashScratchBytes returns the bytes of the two FlashScratch buffers.
func FlashScratchBytes(sh FlashShape) (do16, dsum int) { return 2 * sh.Rows() * sh.D, 4 * sh.Rows() }

// FlashBackward queues the gradients of FlashForward from the output
// gradient dO (float32 rows), q, k, v, and FlashForward's o16 and lse:
// first dO is rounded to bfloat16 into scratch.DO16 and
// dsum_i = Σ_c dO16_ic·o16_ic is formed; then, with the probabilities
// recomputed as p_ij = exp(scale·q_i·k_j - lse_i) for j ≤ i and
// ds_ij = p_ij·(dO16_i·v_j - dsum_i),
//
//	dv_j = Σ_{i≥j} p_ij·dO16_i      dk_j = scale·Σ_{i≥j} ds_ij·q_i   (one block per 64 keys)
//	dq_i = scale·Σ_{j≤i} ds_ij·k_j                                  (one block per 64 queries)
//
// p and ds are rounded to bfloat16 before they multiply; every sum runs in
// a fixed order (no atomics), so results repeat bit for bit.
func (k *Set) FlashBackward(s *cuda.Stream, g FlashGrads, scratch FlashScratch, dO FlashRows, q, kk, v, o16, lse cuda.DevicePtr,
	sh FlashShape, scale float32) error {
	return k.flashBackward(s, g, scratch, dO, q, kk, v, o16, lse, sh, scale, flashDefaultLoads)
}

// flashBackward is FlashBackward with the fragment loading l.
func (k *Set) flashBackward(s *cuda.Stream, g FlashGrads, scratch FlashScratch, dO FlashRows, q, kk, v, o16, lse cuda.DevicePtr,
	sh FlashShape, scale float32, l flashLoads) error {
	err := errors.Join(sh.Check(), g.DQ.check("dq", sh), g.DK.check("dk", sh), g.DV.check("dv", sh), dO.check("dO", sh),
		checkPacked("q, k, v, o16, dO16", q, kk, v, o16, scratch.DO16))
	if err == nil && g.DK.LD != g.DV.LD {
		err = fmt.Errorf("%w: dk and dv with different LD (%d, %d)", ErrFlashShape, g.DK.LD, g.DV.LD)
	}
	if err != nil {
		return err
	}
	rows := sh.Rows()
	prep := new(cuda.Args).Ptr(scratch.DO16).Ptr(scratch.DSum).Ptr(dO.Ptr).U64(uint64(dO.LD)).Ptr(o16).
		U32(uint32(sh.Heads)).U32(uint32(sh.Seq)).U32(uint32(sh.D)).U64(uint64(rows))
	if err := k.warpRows(s, kernelFlashPrep, rows, prep); err != nil {
		return err
	}
	dkdv := new(cuda.Args).Ptr(g.DK.Ptr).Ptr(g.DV.Ptr).U64(uint64(g.DK.LD)).Ptr(q).Ptr(kk).Ptr(v).Ptr(scratch.DO16).
		Ptr(lse).Ptr(scratch.DSum).U32(uint32(sh.Heads)).U32(uint32(sh.Seq)).F32(scale)
	if err := k.flashLaunch(s, l.kernel(flashName(sh.D, kernelFlashDKDV64, kernelFlashDKDV128)), sh, flashDKDVShared(sh.D), dkdv); err != nil {
		return err
	}
	dq := new(cuda.Args).Ptr(g.DQ.Ptr).U64(uint64(g.DQ.LD)).Ptr(q).Ptr(kk).Ptr(v).Ptr(scratch.DO16).
		Ptr(lse).Ptr(scratch.DSum).U32(uint32(sh.Heads)).U32(uint32(sh.Seq)).F32(scale)
	return k.flashLaunch(s, l.kernel(flashName(sh.D, kernelFlashDQ64, kernelFlashDQ128)), sh, flashDQShared(sh.D), dq)
}
