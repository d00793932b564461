package kernels

import (
	"errors"
	"fmt"

	"github.com/distopt/distopt/cuda"
)

// The kernels of flash.cu: fused causal attention (FlashAttention-2) on
// the tensor cores, bfloat16 q, k, v and output gradient, float32
// accumulation and softmax statistics. The forward pass keeps the output
// and the per-row logsumexp; the backward pass recomputes the
// probabilities tile by tile in two kernels with fixed summation orders
// (dK and dV per key tile, dQ per query tile), so results repeat bit for
// bit. Each tile kernel exists in several variants (flashVariant) that
// compute the same products in the same order, so the same bits; the
// exported launchers take the fastest measured one per pass and head width
// (flashDefault).
const (
	kernelFlashFwd64   = "flash_fwd_d64"
	kernelFlashFwd128  = "flash_fwd_d128"
	kernelFlashPrep    = "flash_bwd_prep"
	kernelFlashDKDV64  = "flash_bwd_dkdv_d64"
	kernelFlashDKDV128 = "flash_bwd_dkdv_d128"
	kernelFlashDQ64    = "flash_bwd_dq_d64"
	kernelFlashDQ128   = "flash_bwd_dq_d128"
)

// flashVariant is a way of running the tile kernels; every variant gives
// the same bits.
type flashVariant int

const (
	// flashLdmatrix: blocks of 64 rows, 4 warps of one 16-row m-tile,
	// fragments by ldmatrix.x4, tiles loaded through registers between two
	// barriers, grid (tiles, batch·heads). The reference of the others'
	// bits. (Its twin with 32- and 16-bit shared loads instead of ldmatrix,
	// "lds", was slower on the H200 in every pass and is gone.)
	flashLdmatrix flashVariant = iota
	// flashPipe: blocks of 64 rows; the streamed tiles by cp.async into two
	// buffers (the next one loading during the products), tiles inside the
	// causal triangle unmasked, a warp's fully masked tiles skipped, grid
	// (batch·heads, tiles) with the longest rows first ("_pipe").
	flashPipe
	// flashWide: flashPipe with two m-tiles a warp (blocks of 128 rows),
	// every B fragment feeding two products ("_wide"); the dK/dV kernel at
	// D = 128 keeps one m-tile (its accumulators) and streams query tiles
	// of 64 instead of 32.
	flashWide
	// flashDS (backward only, both kernels together; FlashBackward's choice
	// when FlashScratch.DS is given): the dK/dV kernel of flashPipe also
	// stores the score gradient dS (rounded to bfloat16, as the products
	// round it) into scratch tiles (FlashDSBytes), and the dQ kernel reads
	// them: one product instead of three ("_ds").
	flashDS
)

// flashVariants lists every variant.
var flashVariants = []flashVariant{flashLdmatrix, flashPipe, flashWide, flashDS}

func (v flashVariant) String() string { return [...]string{"ldmatrix", "pipe", "wide", "ds"}[v] }

// flashPass is one of the three tile kernels.
type flashPass int

const (
	flashFwd  flashPass = iota // flash_fwd
	flashDKDV                  // flash_bwd_dkdv
	flashDQ                    // flash_bwd_dq
)

func (p flashPass) String() string { return [...]string{"fwd", "dkdv", "dq"}[p] }

// flashDefault returns the variant the exported launchers use for pass p
// at head width d: the fastest that passed the GPU tests. Measured with
// BenchmarkFlashKernels on one H200 (2026-12-01, driver 580.159, 20
// launches each, every variant passing TestFlashAttention with the same
// bits as flashLdmatrix; lds was flashLdmatrix with plain shared loads,
// since dropped), ms per launch:
//
//	124M shape (batch 8, 12 heads of 64, seq 1024)
//	        ldmatrix  lds    pipe   wide   ds
//	fwd     0.185     0.187  0.135  0.127  -      wide: 102 causal-TFLOP/s
//	dkdv    0.299     0.337  0.171  0.174  0.224
//	dq      0.227     0.203  0.135  0.136  0.092  (ds: one product)
//	bwd     0.496     0.495  0.275  0.276  0.291  (prep + dkdv + dq)
//
//	1.3B shape (batch 4, 16 heads of 128, seq 2048)
//	        ldmatrix  lds    pipe   wide   ds
//	fwd     0.745     0.652  0.433  0.344  -      wide: 200 causal-TFLOP/s
//	dkdv    1.033     1.387  0.601  0.601  0.694  pipe: 229 mma-TFLOP/s
//	dq      0.791     0.858  0.424  0.404  0.184  wide: 255 mma-TFLOP/s
//	bwd     1.776     2.226  1.020  0.994  0.866  (prep + dkdv + dq)
//
// The defaults before (forward lds, backward ldmatrix) took 0.195 + 0.494
// ms at 124M and 0.657 + 1.777 ms at 1.3B. flashDS is faster still for the
// whole 1.3B backward (0.866 ms, 199 causal-TFLOP/s) but needs its dS
// scratch (FlashScratch.DS, FlashDSBytes: 277 MB at the 1.3B shape), so
// FlashBackward takes it only when the caller gives that scratch.
func flashDefault(p flashPass, d int) flashVariant {
	switch {
	case p == flashFwd:
		return flashWide
	case p == flashDQ && d == 128:
		return flashWide
	}
	return flashPipe
}

// flashTile is one tile kernel: its entry, the rows of a block's own tile
// (the grid has ceil(seq/rows) tiles per head), its dynamic shared memory
// and its grid order.
type flashTile struct {
	name   string
	rows   int
	shared int
	headsX bool // grid (batch·heads, tiles), else (tiles, batch·heads)
}

// Tiles of flash.cu: 128 threads a block; the base variants have 64 rows
// per block, 4 warps of 16.
const (
	flashThreads = 128
	flashRows    = 64
)

// flashDKDVQuery returns the query rows per step of the dK/dV kernel of
// the base variants (32 for D = 128, so that its accumulators fit the
// registers).
func flashDKDVQuery(d int) int {
	if d == 128 {
		return 32
	}
	return 64
}

// flashTileOf returns the kernel of pass p at head width d (64 or 128) in
// variant v, and false where v has none.
func flashTileOf(p flashPass, d int, v flashVariant) (flashTile, bool) {
	base := [...]string{flashName(d, kernelFlashFwd64, kernelFlashFwd128), flashName(d, kernelFlashDKDV64, kernelFlashDKDV128),
		flashName(d, kernelFlashDQ64, kernelFlashDQ128)}[p]
	switch v {
	case flashLdmatrix:
		t := flashTile{name: base, rows: flashRows}
		switch p {
		case flashFwd:
			t.shared = 3 * flashRows * d * 2
		case flashDKDV:
			bq := flashDKDVQuery(d)
			t.shared = (2*flashRows+2*bq)*d*2 + 2*bq*4
		case flashDQ:
			t.shared = 4 * flashRows * d * 2
		}
		return t, true
	case flashDS:
		switch p {
		case flashDKDV: // flashPipe's, storing dS
			t, _ := flashTileOf(p, d, flashPipe)
			t.name = base + "_ds"
			return t, true
		case flashDQ: // a dS tile and a key tile, twice
			return flashTile{name: base + "_ds", rows: 64, shared: 2 * (2*64*64 + 2*64*d), headsX: true}, true
		}
	case flashPipe, flashWide:
		mt, n := flashWideTiles(p, d, v)
		r := 16 * mt * 4
		t := flashTile{name: base + "_" + v.String(), rows: r, headsX: true}
		switch p {
		case flashFwd: // Q, then K and V twice
			t.shared = (r + 4*n) * d * 2
		case flashDKDV: // K, V, then twice Q, dO, lse, dsum
			t.shared = 4*r*d + 2*(4*n*d+8*n)
		case flashDQ: // Q, dO, then K and V twice
			t.shared = (2*r + 4*n) * d * 2
		}
		return t, true
	}
	return flashTile{}, false
}

// flashWideTiles returns the m-tiles per warp of pass p's kernel in
// variant flashPipe or flashWide and the rows of the tiles it streams (key
// tiles, or query tiles for the dK/dV kernel), as flash.cu instantiates
// them: pipe one m-tile (dK/dV query tiles of 32 at D = 128 for the
// registers); wide two (dQ key tiles of 32 at D = 128, dK/dV query tiles
// of 32), except the dK/dV kernel at D = 128: one m-tile and query tiles
// of 64.
func flashWideTiles(p flashPass, d int, v flashVariant) (mt, n int) {
	switch {
	case v == flashPipe && p == flashDKDV && d == 128:
		return 1, 32
	case v == flashPipe:
		return 1, 64
	case p == flashDKDV && d == 128:
		return 1, 64
	case p == flashDKDV, p == flashDQ && d == 128:
		return 2, 32
	}
	return 2, 64
}

// flashKernels lists the kernels of flash.cu and flashalt.cu.
func flashKernels() []string {
	names := []string{kernelFlashPrep}
	for _, v := range flashVariants {
		for _, p := range []flashPass{flashFwd, flashDKDV, flashDQ} {
			for _, d := range []int{64, 128} {
				if t, ok := flashTileOf(p, d, v); ok {
					names = append(names, t.name)
				}
			}
		}
	}
	return names
}

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

// flashLaunch queues pass p's kernel in variant v: 128 threads, grid of
// batch·heads and ceil(seq/rows) tiles in the kernel's order, its dynamic
// shared memory (the kernel's limit raised to it first).
func (k *Set) flashLaunch(s *cuda.Stream, p flashPass, v flashVariant, sh FlashShape, args *cuda.Args) error {
	t, ok := flashTileOf(p, sh.D, v)
	if !ok {
		return fmt.Errorf("kernels: flash variant %v has no %v kernel for D = %d", v, p, sh.D)
	}
	tiles, heads := uint32((sh.Seq+t.rows-1)/t.rows), uint32(sh.Batch*sh.Heads)
	grid := cuda.Dim3{X: tiles, Y: heads}
	if t.headsX {
		if tiles > 65535 {
			return fmt.Errorf("%w: %+v: %d tiles of %d rows, the %v kernels take at most 65535", ErrFlashShape, sh, tiles, t.rows, v)
		}
		grid = cuda.Dim3{X: heads, Y: tiles}
	}
	f := k.function(t.name)
	if err := f.SetMaxDynamicShared(t.shared); err != nil {
		return fmt.Errorf("kernels: %s: %w", t.name, err)
	}
	return s.Launch(f, grid, cuda.Dim3{X: flashThreads}, t.shared, args)
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
	return k.flashForward(s, o, o16, lse, q, kk, v, sh, scale, flashDefault(flashFwd, sh.D))
}

// flashForward is FlashForward in variant fv.
func (k *Set) flashForward(s *cuda.Stream, o FlashRows, o16, lse, q, kk, v cuda.DevicePtr, sh FlashShape, scale float32, fv flashVariant) error {
	if err := errors.Join(sh.Check(), o.check("o", sh), checkPacked("q, k, v, o16", q, kk, v, o16)); err != nil {
		return err
	}
	return k.flashLaunch(s, flashFwd, fv, sh, new(cuda.Args).Ptr(o.Ptr).U64(uint64(o.LD)).Ptr(o16).Ptr(lse).Ptr(q).Ptr(kk).Ptr(v).
		U32(uint32(sh.Heads)).U32(uint32(sh.Seq)).F32(scale))
}

// FlashGrads are the outputs of FlashBackward, float32, overwritten.
type FlashGrads struct {
	DQ, DK, DV FlashRows
}

// FlashScratch is FlashBackward's scratch: DO16 the bfloat16 output
// gradient, packed (2·Rows·D bytes, 16-byte aligned), and DSum the per-row
// dot products of the output and its gradient (4·Rows bytes). DS is
// optional: 0, or FlashDSBytes (16-byte aligned) for the score gradient,
// with which FlashBackward stores dS in its dK/dV kernel and forms dQ from
// it (one product instead of three; the same bits). On one H200 that made
// the 1.3B shape's backward 0.866 ms instead of 0.99 ms (277 MB of DS),
// the 124M shape's 0.291 ms instead of 0.275 ms (104 MB).
type FlashScratch struct {
	DO16, DSum, DS cuda.DevicePtr
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
//	dv_j = Σ_{i≥j} p_ij·dO16_i      dk_j = scale·Σ_{i≥j} ds_ij·q_i   (one block per tile of keys)
//	dq_i = scale·Σ_{j≤i} ds_ij·k_j                                  (one block per tile of queries)
//
// p and ds are rounded to bfloat16 before they multiply; every sum runs in
// a fixed order (no atomics), so results repeat bit for bit. With
// scratch.DS set the dS of the dK/dV kernel is kept there and dQ formed
// from it (variant flashDS), else the dQ kernel recomputes it.
func (k *Set) FlashBackward(s *cuda.Stream, g FlashGrads, scratch FlashScratch, dO FlashRows, q, kk, v, o16, lse cuda.DevicePtr,
	sh FlashShape, scale float32) error {
	if scratch.DS != 0 {
		return k.flashBackward(s, g, scratch, dO, q, kk, v, o16, lse, sh, scale, flashDS, flashDS, scratch.DS)
	}
	return k.flashBackward(s, g, scratch, dO, q, kk, v, o16, lse, sh, scale, flashDefault(flashDKDV, sh.D), flashDefault(flashDQ, sh.D), 0)
}

// FlashDSBytes returns the bytes of FlashScratch.DS (the dS tiles of
// variant flashDS): per head the t(t+1)/2 tiles of 64 x 64 bfloat16 of the
// lower triangle, t = ceil(seq/64).
func FlashDSBytes(sh FlashShape) int {
	t := (sh.Seq + 63) / 64
	return 2 * sh.Batch * sh.Heads * t * (t + 1) / 2 * 64 * 64
}

// flashBackward is FlashBackward with the dK/dV kernel of variant kv and
// the dQ kernel of variant qv; ds (FlashDSBytes, 16-byte aligned) is the
// dS scratch of flashDS, which both or neither must be (scratch.DS is not
// read here).
func (k *Set) flashBackward(s *cuda.Stream, g FlashGrads, scratch FlashScratch, dO FlashRows, q, kk, v, o16, lse cuda.DevicePtr,
	sh FlashShape, scale float32, kv, qv flashVariant, ds cuda.DevicePtr) error {
	err := errors.Join(sh.Check(), g.DQ.check("dq", sh), g.DK.check("dk", sh), g.DV.check("dv", sh), dO.check("dO", sh),
		checkPacked("q, k, v, o16, dO16", q, kk, v, o16, scratch.DO16))
	if err == nil && g.DK.LD != g.DV.LD {
		err = fmt.Errorf("%w: dk and dv with different LD (%d, %d)", ErrFlashShape, g.DK.LD, g.DV.LD)
	}
	if err == nil && ((kv == flashDS) != (qv == flashDS) || (kv == flashDS) != (ds != 0) || ds%16 != 0) {
		err = fmt.Errorf("kernels: flash variant %v with dK/dV %v, dQ %v and dS scratch %#x: both or neither, with aligned scratch",
			flashDS, kv, qv, uint64(ds))
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
	if err := k.flashGrad(s, flashDKDV, kv, g, scratch, q, kk, v, lse, sh, scale, ds); err != nil {
		return err
	}
	return k.flashGrad(s, flashDQ, qv, g, scratch, q, kk, v, lse, sh, scale, ds)
}

// flashGrad queues the backward tile kernel p (flashDKDV or flashDQ) in
// variant fv, after flash_bwd_prep has filled scratch (and for flashDS's
// dQ kernel, after its dK/dV kernel has filled ds).
func (k *Set) flashGrad(s *cuda.Stream, p flashPass, fv flashVariant, g FlashGrads, scratch FlashScratch, q, kk, v, lse cuda.DevicePtr,
	sh FlashShape, scale float32, ds cuda.DevicePtr) error {
	args := new(cuda.Args)
	if p == flashDKDV {
		args.Ptr(g.DK.Ptr).Ptr(g.DV.Ptr).U64(uint64(g.DK.LD))
	} else {
		args.Ptr(g.DQ.Ptr).U64(uint64(g.DQ.LD))
	}
	args.Ptr(q).Ptr(kk).Ptr(v).Ptr(scratch.DO16).Ptr(lse).Ptr(scratch.DSum).U32(uint32(sh.Heads)).U32(uint32(sh.Seq)).F32(scale)
	if fv == flashDS {
		args.Ptr(ds)
	}
	return k.flashLaunch(s, p, fv, sh, args)
}
