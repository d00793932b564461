// segments.cuh: what the segment kernels (update.cu, segcast.cu) share: the
// segment table, its chunks, element loads and stores by four, the scale
// rules of the fp8 package, and amax folding.
//
// A launch covers every segment of a shard at once (or of several shards,
// each chunk then taking its segment's shard's buffers: ShardBufs). Each
// segment is cut into chunks of CHUNK elements counted from the segment's
// first element; a thread block takes one chunk at a time (grid-stride over
// chunks), so a whole block always lies in one segment and sees one mode. Inside a chunk,
// thread t handles the four elements rel + 4t .. rel + 4t + 3 of each of
// UNROLL passes of 1024 elements: one warp covers 128 consecutive elements
// (one 1x128 block) and eight lanes 32 (one MX block). Every thread runs
// the same number of passes, so warp-wide operations are always complete;
// elements past the segment's end are masked (cnt < 4).
#pragma once
#include "bf16.cuh"
#include "fp8.cuh"

namespace distopt {

static const u32 THREADS = 256;
static const u32 UNROLL = 4;
static const u64 CHUNK = (u64)THREADS * 4 * UNROLL; // 4096 elements
static const u32 FULL = 0xffffffffu;

// Modes: the values of optimizer.Mode.
enum Mode { MODE_HP = 1, MODE_CURRENT = 2, MODE_DELAYED = 3, MODE_BLOCK = 4, MODE_TILE = 5 };

// Seg is one segment of the table the Go launcher uploads (64 bytes, little
// endian, 8-byte aligned); see kernels.PackSegments.
struct Seg {
    u64 off, len;        // elements within the shard
    u64 chunk0;          // the index of the segment's first chunk
    u64 param_off, cols; // MODE_TILE: flat index of the first element, matrix columns
    u32 mode, slot;      // Mode; amax/scale slot (or first tile slot)
    float step, decay;   // the rule's per-parameter factors
    u32 shard, pad_;     // the segment's shard in a launch over several (ShardBufs)
};

// ShardBufs is one shard's buffers in a launch over several shards (80
// bytes; kernels.Shard): the launcher appends them to the segment table, and
// a chunk takes the buffers of its segment's shard instead of the launch's
// own pointers.
struct ShardBufs {
    void *master, *m, *v;
    const void *grad;
    void *out;          // the FP8 bytes of an FP8 shard, the bfloat16 or float32 copy of a high-precision one
    void *block_scales;
    float *mscales, *vscales;
    u64 base;       // bucket position of the shard's element 0 (MomentSet::base)
    u32 seed, pad_; // MomentSet::seed
};

// The layouts kernels.PackSegments and kernels.PackShards write.
static_assert(sizeof(Seg) == 64 && __builtin_offsetof(Seg, mode) == 40 && __builtin_offsetof(Seg, step) == 48 &&
                  __builtin_offsetof(Seg, shard) == 56,
              "Seg: the layout of kernels.PackSegments");
static_assert(sizeof(ShardBufs) == 80 && __builtin_offsetof(ShardBufs, grad) == 24 &&
                  __builtin_offsetof(ShardBufs, out) == 32 && __builtin_offsetof(ShardBufs, vscales) == 56 &&
                  __builtin_offsetof(ShardBufs, base) == 64 && __builtin_offsetof(ShardBufs, seed) == 72,
              "ShardBufs: the layout of kernels.PackShards");

// find_seg returns the last segment whose first chunk is at most c (segments
// are non-empty and ordered by chunk0).
__device__ __forceinline__ u32 find_seg(const Seg *segs, u32 nseg, u64 c) {
    u32 lo = 0, hi = nseg; // segs[lo].chunk0 <= c < segs[hi].chunk0
    while (hi - lo > 1) {
        const u32 mid = (lo + hi) / 2;
        if (segs[mid].chunk0 <= c) lo = mid; else hi = mid;
    }
    return lo;
}

// find_seg_warp is find_seg with the lanes of a warp probing 32 segments
// at once: ceil(log32(nseg)) rounds of one load each (two for up to 1024
// segments) instead of log2(nseg) dependent loads. Every lane of the warp
// must call it with the same c; segs[0].chunk0 <= c.
__device__ __forceinline__ u32 find_seg_warp(const Seg *segs, u32 nseg, u64 c) {
    const u32 lane = threadIdx.x & 31;
    u32 lo = 0, n = nseg; // the answer is in [lo, lo + n), and segs[lo].chunk0 <= c
    while (n > 1) {
        const u32 step = (n + 31) / 32, off = lane * step;
        // the probes at or below c are a prefix of the lanes, lane 0's at least
        const u32 le = __ballot_sync(FULL, off < n && segs[lo + off].chunk0 <= c);
        const u32 k = (u32)__popc(le) - 1;
        lo += k * step;
        n = min(step, n - k * step);
    }
    return lo;
}

// Element access as float32: float32 storage, or bfloat16 (u16) widened
// exactly and stored with round-to-nearest-even.
__device__ __forceinline__ float ld1(const float *p, u64 i) { return p[i]; }
__device__ __forceinline__ float ld1(const u16 *p, u64 i) { return bf16_to_f32(p[i]); }
__device__ __forceinline__ void st1(float *p, u64 i, float x) { p[i] = x; }
__device__ __forceinline__ void st1(u16 *p, u64 i, float x) { p[i] = (u16)bf16_rn(x); }

__device__ __forceinline__ void ld4(const float *p, u64 i, float x[4]) {
    const float4 v = *reinterpret_cast<const float4 *>(p + i);
    x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
}
__device__ __forceinline__ void ld4(const u16 *p, u64 i, float x[4]) {
    const uint2 v = *reinterpret_cast<const uint2 *>(p + i);
    x[0] = bf16_to_f32(v.x & 0xffffu), x[1] = bf16_to_f32(v.x >> 16);
    x[2] = bf16_to_f32(v.y & 0xffffu), x[3] = bf16_to_f32(v.y >> 16);
}
// st4 writes four elements with one vector store, written as PTX: NVVM
// splits a float4 or uint2 store into 32-bit ones, which ptxas merges back
// only where it can prove the address aligned (a vector load of it), and
// a warp's split stores each touch twice the sectors they fill.
__device__ __forceinline__ void st4(float *p, u64 i, const float x[4]) {
    asm volatile("st.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p + i), "f"(x[0]), "f"(x[1]), "f"(x[2]), "f"(x[3])
                 : "memory");
}
__device__ __forceinline__ void st4(u16 *p, u64 i, const float x[4]) {
    asm volatile("st.v2.u32 [%0], {%1, %2};" ::"l"(p + i), "r"(bf16_rn(x[0]) | bf16_rn(x[1]) << 16),
                 "r"(bf16_rn(x[2]) | bf16_rn(x[3]) << 16)
                 : "memory");
}

// load reads the cnt elements at i (zeros past cnt), by one vector access
// when vec (then cnt is 4 and i+p aligned).
template <typename T> __device__ __forceinline__ void load(const T *p, u64 i, int cnt, bool vec, float x[4]) {
    if (vec) {
        ld4(p, i, x);
        return;
    }
#pragma unroll
    for (int j = 0; j < 4; j++) x[j] = j < cnt ? ld1(p, i + j) : 0.0f;
}

// store writes the first cnt of x at i.
template <typename T> __device__ __forceinline__ void store(T *p, u64 i, int cnt, bool vec, const float x[4]) {
    if (vec) {
        st4(p, i, x);
        return;
    }
#pragma unroll
    for (int j = 0; j < 4; j++)
        if (j < cnt) st1(p, i + j, x[j]);
}

// cast_store writes encode<F>(y[j]) for the first cnt values at dst + i.
template <Fp8 F> __device__ __forceinline__ void cast_store(u8 *dst, u64 i, int cnt, bool vec, const float y[4]) {
    if (vec) {
        *reinterpret_cast<u32 *>(dst + i) = encode4<F>(make_float4(y[0], y[1], y[2], y[3]));
        return;
    }
#pragma unroll
    for (int j = 0; j < 4; j++)
        if (j < cnt) dst[i + j] = (u8)encode<F>(y[j]);
}

// keys4 returns the largest amax key of the first cnt values.
__device__ __forceinline__ u32 keys4(const float x[4], int cnt) {
    u32 k = 0;
#pragma unroll
    for (int j = 0; j < 4; j++)
        if (j < cnt) k = max(k, amax_bits(x[j]));
    return k;
}

// fold_max sets *p = max(*p, v), skipping the atomic when it cannot change
// *p (values only grow, so a stale read only costs an atomic).
__device__ __forceinline__ void fold_max(u32 *p, u32 v) {
    if (v != 0 && v > __ldcg(p)) atomicMax(p, v);
}

// block_fold folds v, one value per thread, into *p with one atomic per
// block. Every thread of the block must call it; sh holds 32 words.
__device__ __forceinline__ void block_fold(u32 *p, u32 v, u32 *sh) {
    v = __reduce_max_sync(FULL, v);
    const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        u32 m = 0;
        for (u32 w = 0; w < (blockDim.x + 31) / 32; w++) m = max(m, sh[w]);
        fold_max(p, m);
    }
    __syncthreads();
}

// scale_from_amax is fp8.ScaleFromAmax for the amax with bits ab (non-
// negative key): fmax the format's largest value, mfac = float32(2^-margin)
// as the host computes it.
__device__ __forceinline__ void scale_from_amax(u32 ab, float fmax, float mfac, bool pow2, float &scale, float &inv) {
    if (ab == 0 || ab >= 0x7f800000u) {
        scale = 1.0f, inv = 1.0f;
        return;
    }
    float s = __fmul_rn(__fdiv_rn(fmax, __uint_as_float(ab)), mfac);
    if (s > 3.40282346638528859812e+38f) s = 3.40282346638528859812e+38f; // +Inf
    if (s < 1.17549435082228750797e-38f) s = 1.17549435082228750797e-38f; // 2^-126
    if (pow2) s = __uint_as_float(__float_as_uint(s) & 0xff800000u);
    // 1/s correctly rounded (rcp.rn: the bits of 1.0f / s, in fewer instructions)
    scale = s, inv = __frcp_rn(s);
}

// emax_elem is fp8.Format.EmaxElem.
template <Fp8 F> __device__ __forceinline__ int emax_elem() { return F == E4M3 ? 8 : 15; }

// mx_scale is the E8M0 code of an MX block of amax key a (0xff for Inf or
// NaN) and the factor 2^-X its elements are multiplied by (fp8.CastMX).
template <Fp8 F> __device__ __forceinline__ u32 mx_scale(u32 a, float &mul) {
    if (a >= 0x7f800000u) {
        mul = 0.0f;
        return 0xffu;
    }
    if (a == 0) {
        mul = 1.0f;
        return 127u;
    }
    int e = (int)(a >> 23) - 127;
    if (a < (1u << 23)) e = (32 - __clz(a)) - 150;
    const int x = max(e - emax_elem<F>(), -127);
    mul = __uint_as_float((u32)(127 - x) << 23);
    return (u32)(x + 127);
}

// tiles4 writes the tile (128x128, numbered as fp8.TileIndex) of the four
// flat indices idx .. idx+3 of a row-major matrix of cols columns, with one
// division: the element-by-element way, for the chunks of update.cu outside
// bands and the passes of segcast.cu outside WarpPos.
__device__ __forceinline__ void tiles4(u64 idx, u64 cols, u64 per_row, u32 t[4]) {
    u64 row, col;
    if ((idx | cols) >> 32 == 0) { // 32-bit division is several times cheaper
        const u32 r = (u32)idx / (u32)cols;
        row = r, col = (u32)idx - r * (u32)cols;
    } else {
        row = idx / cols, col = idx - row * cols;
    }
#pragma unroll
    for (int j = 0; j < 4; j++) {
        t[j] = (u32)((row >> 7) * per_row + (col >> 7));
        if (++col == cols) col = 0, row++;
    }
}

// fold_tiles folds the keys k of the first cnt elements into amax[t[j]]:
// one atomic per warp when the warp's elements lie in one tile, otherwise
// one per run of equal tiles of each thread. Every lane of the warp must
// call it.
__device__ __forceinline__ void fold_tiles(u32 *amax, const u32 t[4], const u32 k[4], int cnt) {
    const u32 t0 = __shfl_sync(FULL, t[0], 0);
    bool same = true;
    u32 m = 0;
#pragma unroll
    for (int j = 0; j < 4; j++)
        if (j < cnt) same = same && t[j] == t0, m = max(m, k[j]);
    if (__all_sync(FULL, same)) {
        m = __reduce_max_sync(FULL, m);
        if ((threadIdx.x & 31) == 0) fold_max(amax + t0, m);
        return;
    }
    u32 ct = t[0], cm = 0;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        if (j >= cnt) break;
        if (t[j] != ct) fold_max(amax + ct, cm), ct = t[j], cm = 0;
        cm = max(cm, k[j]);
    }
    if (cnt > 0) fold_max(amax + ct, cm);
}

// WarpPos is the row and column, in a matrix of cols columns, of a warp's
// first element in a pass of a tile segment (the lanes hold the 128
// elements from there on, four each), in 32-bit arithmetic: only for
// segments whose flat indices fit 32 bits (warp_pos_ok). segcast.cu divides
// once per chunk and then moves it forward pass by pass; when a pass's 128
// elements lie in one row from a column that is a multiple of 4 (in_row),
// lane l's four elements lie in the tile of column col + 4l.
struct WarpPos {
    u32 row, col;
};

// warp_pos_ok reports whether WarpPos covers the segment: flat indices
// below 2^32 and rows at least as long as a warp's 128 elements.
__device__ __forceinline__ bool warp_pos_ok(u64 param_off, u64 len, u64 cols) {
    return (param_off + len) >> 32 == 0 && cols >= 128;
}

// warp_pos returns the WarpPos of flat index idx (warp_pos_ok).
__device__ __forceinline__ WarpPos warp_pos(u64 idx, u32 cols) {
    const u32 r = (u32)idx / cols;
    return WarpPos{r, (u32)idx - r * cols};
}

// next_pass moves q forward by one pass (THREADS * 4 elements).
__device__ __forceinline__ void next_pass(WarpPos &q, u32 cols) {
    q.col += THREADS * 4;
    while (q.col >= cols) q.col -= cols, q.row++; // once at most when cols >= 1024
}

// in_row reports whether the warp's 128 elements from q lie in one row from
// a column that is a multiple of 4.
__device__ __forceinline__ bool in_row(WarpPos q, u32 cols) { return (q.col & 3) == 0 && q.col + 128 <= cols; }

// lane_tile is the tile of lane's four elements of an in_row pass from q.
__device__ __forceinline__ u32 lane_tile(WarpPos q, u32 per_row, u32 lane) {
    return (q.row >> 7) * per_row + ((q.col + 4 * lane) >> 7);
}

// Bands. Folding a tile amax per warp and pass (fold_tiles) was nearly all
// of the tile overhead of the update kernel (0.14 ms per 2^28 elements on
// an H200, against 0.01 for computing the tiles): a chunk of a matrix of
// 4096 columns is one row, 32 tiles, and the chunks in flight at once are
// the rows below it, whose folds go to the same few slots. So update.cu
// takes the rows of a tile segment in bands of BAND_ROWS rows, aligned on
// the matrix's rows, each cut into chunks of BAND_ROWS x 128 elements: one
// tile per chunk, one fold per chunk. A segment has bands when its matrix
// has a multiple of 128 columns, its elements are 4-aligned in the shard
// the same way as in the matrix (so that loads stay vectors), and it holds
// at least one whole band; the elements before the first band (head) and
// after the last (tail) are chunked as usual. kernels.PackSegments counts
// the chunks the same way (segment.go, bandSplit).
static const u64 BAND_ROWS = CHUNK / 128; // 32

// BandSplit is a segment's cut into head, bands and tail (all in elements,
// relative to the segment's first element), and the chunks of each part.
struct BandSplit {
    u64 head, band_elems, tail;
    u64 head_chunks, band_chunks;
};

// band_split returns the BandSplit of a MODE_TILE segment; band_chunks is 0
// when it has no bands (then the head is the whole segment).
__device__ __forceinline__ BandSplit band_split(const Seg &s) {
    BandSplit b{s.len, 0, 0, (s.len + CHUNK - 1) / CHUNK, 0};
    if (s.cols % 128 != 0 || (s.off - s.param_off) % 4 != 0) return b;
    const u64 band = BAND_ROWS * s.cols;
    const u64 b0 = (s.param_off + band - 1) / band * band, b1 = (s.param_off + s.len) / band * band;
    if (b1 <= b0) return b;
    b.head = b0 - s.param_off;
    b.band_elems = b1 - b0;
    b.tail = s.len - b.head - b.band_elems;
    b.head_chunks = (b.head + CHUNK - 1) / CHUNK;
    b.band_chunks = b.band_elems / CHUNK;
    return b;
}

} // namespace distopt
