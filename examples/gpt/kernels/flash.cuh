// flash.cuh: fused causal attention (the FlashAttention-2 algorithm) on the
// tensor cores. The forward pass keeps only the output and the per-row
// logsumexp; the backward pass recomputes the probabilities tile by tile.
//
// Inputs are bfloat16, packed [batch·heads, seq, D] (D = 64 or 128, a
// row of D elements per token and head); float32 outputs and the float32
// output gradient are "rows": head hh of token (b, t) at
// p + (b·seq + t)·ld + hh·D (the model's row-major activations, heads side
// by side). Products on the tensor cores by mma.sync.m16n8k16 (bfloat16
// inputs, float32 accumulation); softmax statistics in float32.
//
// Tiles: blocks of 4 warps (128 threads); each warp owns 16 rows of its
// block's 64-row tile (queries in the forward and dQ kernels, keys in the
// dK/dV kernel) and loops over tiles of the other side staged in shared
// memory. Only tiles on or below the diagonal are visited. Rows and
// columns at or beyond seq (the ragged last tile) are loaded as zeros,
// masked out of the softmax and never stored.
//
// mma.m16n8k16 fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16"),
// g = lane/4, c = lane%4, each .b32 register two bfloat16 (lower column or
// row in the low half):
//   A (16x16, row-major): a0 (g, 2c..2c+1), a1 (g+8, 2c..), a2 (g, 2c+8..),
//                         a3 (g+8, 2c+8..)
//   B (16x8, k x n):      b0 (k = 2c..2c+1, n = g), b1 (k = 2c+8..2c+9, n = g)
//   C (16x8, float32):    c0, c1 (g, 2c..2c+1), c2, c3 (g+8, 2c..2c+1)
// Two neighbouring C tiles (columns 0-7 and 8-15) are, rounded to bfloat16,
// the A fragment of the next product (probabilities times values).
//
// Shared tiles are [rows][D] bfloat16 with the 16-byte chunks of row r
// XOR-swizzled by r mod 8, so that the fragment loads of 8 rows at one
// column hit 8 different bank groups. Fragments come from the tiles by
// ldmatrix.x4 (four 8x8 matrices per instruction; .trans for the B operand
// of P·V, dS·K, Pᵀ·dO, dSᵀ·Q, whose tiles are stored k-major). (An _lds
// twin of the first kernels loaded them by 32- and 16-bit loads: slower on
// an H200 in every pass, dropped.) The _pipe and
// _wide kernels ("The wide kernels" below) add cp.async double buffering,
// unmasked inner tiles, a longest-first grid and (wide) two m-tiles per
// warp. Not done: Hopper's wgmma and TMA.
//
// Per tile, each warp of 16 rows computes S = A·Bᵀ (rows_product, N/8
// n-tiles x D/16 k-steps of mma), masks and exponentiates it in registers,
// and accumulates P·V into D/8 n-tiles of float32 (accumulate_pv):
//   flash_fwd   (query tile): S = Q·Kᵀ, online softmax (running max m and
//               sum l per row, the accumulator rescaled by exp2(m_old -
//               m_new)), O += P·V; at the end O/l and lse = m + log l.
//   flash_dkdv  (key tile):   Sᵀ = K·Qᵀ, Pᵀ = exp(Sᵀ - lse), dPᵀ = V·dOᵀ,
//               dSᵀ = Pᵀ(dPᵀ - dsum); dV += Pᵀ·dO, dK += dSᵀ·Q.
//   flash_dq    (query tile): S = Q·Kᵀ, P, dP = dO·Vᵀ, dS; dQ += dS·K.
//
// Determinism: every sum has a fixed order (the mma's, the tile loops in
// increasing order, the quad butterflies); no atomics. dK and dV of a key
// tile are summed by one block looping over the query tiles, dQ of a query
// tile by another kernel's block looping over the key tiles.
//
// Exponentials are exp2f of arguments pre-multiplied by log2(e).
//
// This header holds the device code and the entry-point macros; flash.cu
// defines the entry points the model launches (flash.go's flashDefault)
// and flashalt.cu every other variant. flash ships as PTX, which the
// driver's JIT compiles at load (faster code than ptxas 11.8); flashalt
// ships as machine code, so that a fresh machine compiles only the kernels
// the model runs. Compare variants' speeds with DISTOPT_CUDA_PTX=1, which
// loads both from their PTX.
#pragma once
#include "bf16.cuh"

using namespace distopt;

// A named namespace, not an anonymous one: the names of an anonymous
// namespace's __shared__ arrays carry a hash of the file's path, so the
// PTX would depend on where the repository is checked out (check_ptx.sh).
namespace flashk {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kRows = 16 * kWarps; // rows of a block's own tile
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// sidx is the element index of (r, col) in a swizzled [rows][D] tile.
template <int D> __device__ __forceinline__ int sidx(int r, int col) {
    return r * D + ((((col >> 3) ^ (r & 7))) << 3) + (col & 7);
}

// pack2 rounds lo and hi to bfloat16 (nearest even) into one register.
__device__ __forceinline__ u32 pack2(float lo, float hi) {
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// ldm4 loads four 8x8 bfloat16 matrices from shared memory
// (ldmatrix.x4): lanes 8i..8i+7 give the addresses of the 8 rows of matrix
// i (16 contiguous bytes each); lane l receives in r[i] row l/4, columns
// 2(l%4) and 2(l%4)+1 of matrix i, or with Trans the transpose: rows
// 2(l%4) and 2(l%4)+1 of column l/4.
template <bool Trans> __device__ __forceinline__ void ldm4(u32 *r, const u16 *p) {
    u32 a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    if (Trans)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a)
                     : "memory");
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a)
                     : "memory");
}

// mma: c += a·b, m16n8k16, bfloat16 inputs, float32 accumulation.
__device__ __forceinline__ void mma(float *c, const u32 *a, u32 b0, u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// load_tile copies rows [row0, row0 + R) of a packed [seq, D] bfloat16
// matrix into a swizzled shared tile, zeros for rows at or beyond seq.
template <int D, int R> __device__ __forceinline__ void load_tile(u16 *s, const u16 *g, int row0, int seq) {
    constexpr int chunks = D / 8;
    for (int i = threadIdx.x; i < R * chunks; i += kThreads) {
        const int r = i / chunks, c = i % chunks;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (row0 + r < seq) v = *reinterpret_cast<const uint4 *>(g + (u64)(row0 + r) * D + 8 * c);
        *reinterpret_cast<uint4 *>(s + r * D + ((c ^ (r & 7)) << 3)) = v;
    }
}

// load_a returns the A fragment of rows r0..r0+15, columns k0..k0+15 of a
// shared tile: one ldmatrix.x4 (matrices: rows r0.., r0+8.. at columns k0,
// then the same at k0+8).
template <int D> __device__ __forceinline__ void load_a(u32 *a, const u16 *s, int r0, int k0) {
    const int lane = threadIdx.x & 31, m = lane >> 3;
    ldm4<false>(a, s + sidx<D>(r0 + 8 * (m & 1) + (lane & 7), k0 + 8 * (m >> 1)));
}

// rows_product: acc[N/8][4] = A·Bᵀ for A rows a0..a0+15 of sa and B rows
// 0..N-1 of sb (both [.][D] shared tiles): the scores of 16 rows against N
// columns, the reduction over D. The B fragments of two n-tiles come from
// one ldmatrix.x4 (rows 8n.. at columns k and k+8, then rows 8n+8.. at the
// same).
template <int D, int N>
__device__ __forceinline__ void rows_product(float (*acc)[4], const u16 *sa, int a0, const u16 *sb) {
    const int lane = threadIdx.x & 31, m = lane >> 3;
#pragma unroll
    for (int n = 0; n < N / 8; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0;
#pragma unroll
    for (int k = 0; k < D; k += 16) {
        u32 a[4];
        load_a<D>(a, sa, a0, k);
#pragma unroll
        for (int n = 0; n < N / 8; n += 2) {
            u32 b[4];
            ldm4<false>(b, sb + sidx<D>(8 * n + 8 * (m >> 1) + (lane & 7), k + 8 * (m & 1)));
            mma(acc[n], a, b[0], b[1]);
            mma(acc[n + 1], a, b[2], b[3]);
        }
    }
}

// accumulate_pv: out[D/8][4] += P·V for P 16 x N in C fragments (rounded to
// bfloat16 here) and V rows 0..N-1 of the shared tile sv. The B fragments
// of two n-tiles come from one ldmatrix.x4.trans (rows 16k.. and 16k+8.. at
// column 8n, then the same at 8n+8).
template <int D, int N>
__device__ __forceinline__ void accumulate_pv(float (*out)[4], const float (*p)[4], const u16 *sv) {
    const int lane = threadIdx.x & 31, m = lane >> 3;
#pragma unroll
    for (int k = 0; k < N / 16; k++) {
        const u32 a[4] = {pack2(p[2 * k][0], p[2 * k][1]), pack2(p[2 * k][2], p[2 * k][3]),
                          pack2(p[2 * k + 1][0], p[2 * k + 1][1]), pack2(p[2 * k + 1][2], p[2 * k + 1][3])};
#pragma unroll
        for (int n = 0; n < D / 8; n += 2) {
            u32 b[4];
            ldm4<true>(b, sv + sidx<D>(16 * k + 8 * (m & 1) + (lane & 7), 8 * n + 8 * (m >> 1)));
            mma(out[n], a, b[0], b[1]);
            mma(out[n + 1], a, b[2], b[3]);
        }
    }
}

// quad_max and quad_sum reduce over the 4 lanes that share a row.
__device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// store_rows writes acc[D/8][4] times mul[2] (per row half) for the 16
// rows r0.. of a warp to the float32 rows layout at base (row r at
// base + r·ld), rows below seq only.
template <int D>
__device__ __forceinline__ void store_rows(float *base, u64 ld, int r0, int seq, const float (*acc)[4], const float *mul) {
    const int g = (threadIdx.x & 31) >> 2, c = threadIdx.x & 3;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int r = r0 + g + 8 * h;
        if (r >= seq) continue;
        float *row = base + (u64)r * ld;
#pragma unroll
        for (int n = 0; n < D / 8; n++)
            *reinterpret_cast<float2 *>(row + 8 * n + 2 * c) = make_float2(acc[n][2 * h] * mul[h], acc[n][2 * h + 1] * mul[h]);
    }
}

// Where head bh = b·heads + hh of a rows tensor starts.
__device__ __forceinline__ u64 rows_offset(u32 bh, u32 heads, u32 seq, u64 ld, int D) {
    return (u64)(bh / heads) * seq * ld + (u64)(bh % heads) * D;
}

// flash_fwd: block (query tile, bh); see flash_fwd_d64.
template <int D>
__device__ void flash_fwd(float *o, u64 ldo, u16 *o16, float *lse, const u16 *q, const u16 *k, const u16 *v, u32 heads,
                          u32 seq, float scale) {
    extern __shared__ uint4 smem_raw[];
    u16 *sq = reinterpret_cast<u16 *>(smem_raw), *sk = sq + kRows * D, *sv = sk + kRows * D;
    const int qt = gridDim.x - 1 - blockIdx.x; // the longest rows first
    const u32 bh = blockIdx.y;
    const int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, c = threadIdx.x & 3;
    const u64 head = (u64)bh * seq * D;
    const int r0 = qt * kRows + 16 * warp; // the warp's first query row
    load_tile<D, kRows>(sq, q + head, qt * kRows, seq);
    const float cl = scale * kLog2e;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0};
    float acc[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0;
    for (int kt = 0; kt <= qt; kt++) {
        __syncthreads();
        load_tile<D, kRows>(sk, k + head, kt * kRows, seq);
        load_tile<D, kRows>(sv, v + head, kt * kRows, seq);
        __syncthreads();
        float s[kRows / 8][4];
        rows_product<D, kRows>(s, sq, 16 * warp, sk);
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int n = 0; n < kRows / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = r0 + g + 8 * (e >> 1), col = kt * kRows + 8 * n + 2 * c + (e & 1);
                s[n][e] = col <= r && col < (int)seq ? s[n][e] * cl : -INFINITY;
                mx[e >> 1] = fmaxf(mx[e >> 1], s[n][e]);
            }
        float base[2], alpha[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const float mn = fmaxf(m[h], quad_max(mx[h]));
            base[h] = mn == -INFINITY ? 0.0f : mn;
            alpha[h] = exp2f(m[h] - base[h]);
            m[h] = mn;
            l[h] *= alpha[h];
        }
#pragma unroll
        for (int n = 0; n < kRows / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                s[n][e] = exp2f(s[n][e] - base[e >> 1]);
                l[e >> 1] += s[n][e];
            }
#pragma unroll
        for (int n = 0; n < D / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[n][e] *= alpha[e >> 1];
        accumulate_pv<D, kRows>(acc, s, sv);
    }
    float inv[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        l[h] = quad_sum(l[h]);
        inv[h] = 1.0f / l[h];
        const int r = r0 + g + 8 * h;
        if (c == 0 && r < (int)seq) lse[(u64)bh * seq + r] = (m[h] + log2f(l[h])) * kLn2;
    }
    store_rows<D>(o + rows_offset(bh, heads, seq, ldo, D), ldo, r0, seq, acc, inv);
    if (o16 == nullptr) return;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int r = r0 + g + 8 * h;
        if (r >= (int)seq) continue;
        u16 *row = o16 + head + (u64)r * D;
#pragma unroll
        for (int n = 0; n < D / 8; n++)
            *reinterpret_cast<u32 *>(row + 8 * n + 2 * c) = pack2(acc[n][2 * h] * inv[h], acc[n][2 * h + 1] * inv[h]);
    }
}

// load_stats copies R values of a per-row statistic [bh·seq + row] from
// row0 into shared memory (times mul), 0 beyond seq.
template <int R> __device__ __forceinline__ void load_stats(float *s, const float *g, int row0, int seq, float mul) {
    for (int i = threadIdx.x; i < R; i += kThreads) s[i] = row0 + i < seq ? g[row0 + i] * mul : 0.0f;
}

// flash_dkdv: block (key tile, bh); see flash_bwd_dkdv_d64. BQ query rows
// per tile of the loop.
template <int D, int BQ>
__device__ void flash_dkdv(float *dk, float *dv, u64 ld, const u16 *q, const u16 *k, const u16 *v, const u16 *dO,
                           const float *lse, const float *dsum, u32 heads, u32 seq, float scale) {
    extern __shared__ uint4 smem_raw[];
    u16 *sk = reinterpret_cast<u16 *>(smem_raw), *sv = sk + kRows * D, *sq = sv + kRows * D, *sd = sq + BQ * D;
    float *slse = reinterpret_cast<float *>(sd + BQ * D), *sdot = slse + BQ;
    const int kt = gridDim.x - 1 - blockIdx.x; // the shortest loops last
    const u32 bh = blockIdx.y;
    const int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, c = threadIdx.x & 3;
    const u64 head = (u64)bh * seq * D;
    const int r0 = kt * kRows + 16 * warp; // the warp's first key row
    load_tile<D, kRows>(sk, k + head, kt * kRows, seq);
    load_tile<D, kRows>(sv, v + head, kt * kRows, seq);
    const float cl = scale * kLog2e;
    float gk[D / 8][4], gv[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) gk[n][e] = gv[n][e] = 0;
    const int last = ((int)seq - 1) / BQ;
    for (int it = kt * kRows / BQ; it <= last; it++) {
        __syncthreads();
        load_tile<D, BQ>(sq, q + head, it * BQ, seq);
        load_tile<D, BQ>(sd, dO + head, it * BQ, seq);
        load_stats<BQ>(slse, lse + (u64)bh * seq, it * BQ, seq, kLog2e);
        load_stats<BQ>(sdot, dsum + (u64)bh * seq, it * BQ, seq, 1.0f);
        __syncthreads();
        float p[BQ / 8][4], dp[BQ / 8][4];
        rows_product<D, BQ>(p, sk, 16 * warp, sq); // Sᵀ: keys x queries
        rows_product<D, BQ>(dp, sv, 16 * warp, sd); // dPᵀ = V·dOᵀ
#pragma unroll
        for (int n = 0; n < BQ / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = r0 + g + 8 * (e >> 1), jl = 8 * n + 2 * c + (e & 1), col = it * BQ + jl;
                const bool ok = col >= r && col < (int)seq;
                p[n][e] = ok ? exp2f(p[n][e] * cl - slse[jl]) : 0.0f;
                dp[n][e] = p[n][e] * (dp[n][e] - sdot[jl]);
            }
        accumulate_pv<D, BQ>(gv, p, sd);  // dV += Pᵀ·dO
        accumulate_pv<D, BQ>(gk, dp, sq); // dK += dSᵀ·Q
    }
    const float one[2] = {1.0f, 1.0f}, sc[2] = {scale, scale};
    store_rows<D>(dk + rows_offset(bh, heads, seq, ld, D), ld, r0, seq, gk, sc);
    store_rows<D>(dv + rows_offset(bh, heads, seq, ld, D), ld, r0, seq, gv, one);
}

// flash_dq: block (query tile, bh); see flash_bwd_dq_d64.
template <int D>
__device__ void flash_dq(float *dq, u64 ld, const u16 *q, const u16 *k, const u16 *v, const u16 *dO, const float *lse,
                         const float *dsum, u32 heads, u32 seq, float scale) {
    extern __shared__ uint4 smem_raw[];
    u16 *sq = reinterpret_cast<u16 *>(smem_raw), *sd = sq + kRows * D, *sk = sd + kRows * D, *sv = sk + kRows * D;
    const int qt = gridDim.x - 1 - blockIdx.x;
    const u32 bh = blockIdx.y;
    const int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, c = threadIdx.x & 3;
    const u64 head = (u64)bh * seq * D;
    const int r0 = qt * kRows + 16 * warp;
    load_tile<D, kRows>(sq, q + head, qt * kRows, seq);
    load_tile<D, kRows>(sd, dO + head, qt * kRows, seq);
    const float cl = scale * kLog2e;
    float rl[2], rd[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int r = r0 + g + 8 * h;
        rl[h] = r < (int)seq ? lse[(u64)bh * seq + r] * kLog2e : 0.0f;
        rd[h] = r < (int)seq ? dsum[(u64)bh * seq + r] : 0.0f;
    }
    float acc[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0;
    for (int kt = 0; kt <= qt; kt++) {
        __syncthreads();
        load_tile<D, kRows>(sk, k + head, kt * kRows, seq);
        load_tile<D, kRows>(sv, v + head, kt * kRows, seq);
        __syncthreads();
        float p[kRows / 8][4], dp[kRows / 8][4];
        rows_product<D, kRows>(p, sq, 16 * warp, sk);
        rows_product<D, kRows>(dp, sd, 16 * warp, sv);
#pragma unroll
        for (int n = 0; n < kRows / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int h = e >> 1, r = r0 + g + 8 * h, col = kt * kRows + 8 * n + 2 * c + (e & 1);
                const bool ok = col <= r && col < (int)seq;
                const float pe = ok ? exp2f(p[n][e] * cl - rl[h]) : 0.0f;
                p[n][e] = pe * (dp[n][e] - rd[h]);
            }
        accumulate_pv<D, kRows>(acc, p, sk); // dQ += dS·K
    }
    const float sc[2] = {scale, scale};
    store_rows<D>(dq + rows_offset(bh, heads, seq, ld, D), ld, r0, seq, acc, sc);
}

// ---- The wide kernels (variant "wide") ----
//
// The same products in the same order as the kernels above, so the same
// bits, with four changes for speed: each warp owns MT m-tiles of 16 rows
// (the B fragment of every ldmatrix feeds MT mma, which halves the shared
// memory traffic per product for MT = 2); the streamed tiles come through
// cp.async into two buffers, the next tile loading while the current one is
// computed; tiles wholly inside the causal triangle skip the mask; and the
// grid is (bh, tile) with the tile index reversed in y, so that the longest
// rows of every head start first. Tiles a warp's rows do not reach are
// skipped by that warp (their probabilities are all zero).

// smem_addr returns the shared-window address of p.
__device__ __forceinline__ u32 smem_addr(const void *p) { return (u32)__cvta_generic_to_shared(p); }

// ldsm4 is ldm4 from a shared-window address, without the memory clobber
// (the barriers order it against the tile copies).
template <bool Trans> __device__ __forceinline__ void ldsm4(u32 *r, u32 a) {
    if (Trans)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a));
}

// mmaw is mma without volatile, so that the compiler may interleave the
// products with the fragment loads.
__device__ __forceinline__ void mmaw(float *c, const u32 *a, u32 b0, u32 b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// cp.async: copies of 16 (cg) or 4 (ca) bytes into shared memory, the
// bytes from src-size on zero-filled.
__device__ __forceinline__ void cp_async16(u32 dst, const void *src, u32 n) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(n) : "memory");
}
__device__ __forceinline__ void cp_async4(u32 dst, const void *src, u32 n) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(n) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

// cp_async_sync waits for every copy of this thread, then for the block.
__device__ __forceinline__ void cp_async_sync() {
    asm volatile("cp.async.wait_group 0;" ::: "memory");
    __syncthreads();
}

// load_tile_async is load_tile by cp.async into the tile at shared address
// s: rows at or beyond seq are zero-filled (their source clamped to row
// seq - 1, never read).
template <int D, int R> __device__ __forceinline__ void load_tile_async(u32 s, const u16 *g, int row0, int seq) {
    constexpr int chunks = D / 8;
    static_assert(R * chunks % kThreads == 0, "tile chunks not a multiple of the block");
#pragma unroll
    for (int j = 0; j < R * chunks / kThreads; j++) {
        const int i = threadIdx.x + j * kThreads, r = i / chunks, c = i % chunks, row = row0 + r;
        const bool in = row < seq;
        cp_async16(s + 2 * (r * D + ((c ^ (r & 7)) << 3)), g + (u64)(in ? row : seq - 1) * D + 8 * c, in ? 16 : 0);
    }
}

// load_stats_async copies R floats of a per-row statistic from row0 (0
// beyond seq) into shared memory at s.
template <int R> __device__ __forceinline__ void load_stats_async(u32 s, const float *g, int row0, int seq) {
    static_assert(R <= kThreads, "statistic tile larger than the block");
    const int i = threadIdx.x, row = row0 + i;
    if (i < R) cp_async4(s + 4 * i, g + (row < seq ? row : seq - 1), row < seq ? 4 : 0);
}

// rows_product_w is rows_product for MT m-tiles: acc[mt] = rows a0 + 16·mt
// .. of sa times rows 0..N-1 of sb, each B fragment used by all MT.
template <int D, int N, int MT>
__device__ __forceinline__ void rows_product_w(float (*acc)[N / 8][4], u32 sa, int a0, u32 sb) {
    const int lane = threadIdx.x & 31, m = lane >> 3;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int n = 0; n < N / 8; n++) acc[mt][n][0] = acc[mt][n][1] = acc[mt][n][2] = acc[mt][n][3] = 0;
#pragma unroll
    for (int k = 0; k < D; k += 16) {
        u32 a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
            ldsm4<false>(a[mt], sa + 2 * sidx<D>(a0 + 16 * mt + 8 * (m & 1) + (lane & 7), k + 8 * (m >> 1)));
#pragma unroll
        for (int n = 0; n < N / 8; n += 2) {
            u32 b[4];
            ldsm4<false>(b, sb + 2 * sidx<D>(8 * n + 8 * (m >> 1) + (lane & 7), k + 8 * (m & 1)));
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                mmaw(acc[mt][n], a[mt], b[0], b[1]);
                mmaw(acc[mt][n + 1], a[mt], b[2], b[3]);
            }
        }
    }
}

// accumulate_pv_w is accumulate_pv for MT m-tiles of P, each V fragment
// used by all MT.
template <int D, int N, int MT>
__device__ __forceinline__ void accumulate_pv_w(float (*out)[D / 8][4], const float (*p)[N / 8][4], u32 sv) {
    const int lane = threadIdx.x & 31, m = lane >> 3;
#pragma unroll
    for (int k = 0; k < N / 16; k++) {
        u32 a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            a[mt][0] = pack2(p[mt][2 * k][0], p[mt][2 * k][1]), a[mt][1] = pack2(p[mt][2 * k][2], p[mt][2 * k][3]);
            a[mt][2] = pack2(p[mt][2 * k + 1][0], p[mt][2 * k + 1][1]), a[mt][3] = pack2(p[mt][2 * k + 1][2], p[mt][2 * k + 1][3]);
        }
#pragma unroll
        for (int n = 0; n < D / 8; n += 2) {
            u32 b[4];
            ldsm4<true>(b, sv + 2 * sidx<D>(16 * k + 8 * (m & 1) + (lane & 7), 8 * n + 8 * (m >> 1)));
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                mmaw(out[mt][n], a[mt], b[0], b[1]);
                mmaw(out[mt][n + 1], a[mt], b[2], b[3]);
            }
        }
    }
}

// scores scales the scores s of a warp's MT m-tiles by cl (log2(e)·scale)
// and takes the row maxima mx; with Masked, elements of a column beyond
// the row or at or beyond seq become -inf (r0: the lane's first row, col0:
// its first column).
template <int N, int MT, bool Masked>
__device__ __forceinline__ void scores(float (*s)[N / 8][4], float (*mx)[2], float cl, int r0, int col0, int seq) {
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        mx[mt][0] = mx[mt][1] = -INFINITY;
#pragma unroll
        for (int n = 0; n < N / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = r0 + 16 * mt + 8 * (e >> 1), col = col0 + 8 * n + (e & 1);
                s[mt][n][e] = !Masked || (col <= r && col < seq) ? s[mt][n][e] * cl : -INFINITY;
                mx[mt][e >> 1] = fmaxf(mx[mt][e >> 1], s[mt][n][e]);
            }
    }
}

// dscores turns the scores p and dp = dO·vᵀ of a warp's MT m-tiles of
// queries into dS = P·(dP - dsum), P = exp2(p·cl - rl), with the mask of
// scores; rl and rd the rows' lse·log2(e) and dsum.
template <int N, int MT, bool Masked>
__device__ __forceinline__ void dscores(float (*p)[N / 8][4], const float (*dp)[N / 8][4], const float (*rl)[2],
                                        const float (*rd)[2], float cl, int r0, int col0, int seq) {
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int n = 0; n < N / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int h = e >> 1, r = r0 + 16 * mt + 8 * h, col = col0 + 8 * n + (e & 1);
                const float pe = !Masked || (col <= r && col < seq) ? exp2f(p[mt][n][e] * cl - rl[mt][h]) : 0.0f;
                p[mt][n][e] = pe * (dp[mt][n][e] - rd[mt][h]);
            }
}

// tscores is dscores transposed, for the dK/dV kernel: rows are keys,
// columns queries with their lse·log2(e) and dsum in shared memory (slse,
// sdot, indexed by the column within the tile); the mask keeps a query
// column at or after the key row and below seq. p becomes P, dp dS.
template <int N, int MT, bool Masked>
__device__ __forceinline__ void tscores(float (*p)[N / 8][4], float (*dp)[N / 8][4], const float *slse, const float *sdot,
                                        float cl, int r0, int c2, int col0, int seq) {
#pragma unroll
    for (int n = 0; n < N / 8; n++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int jl = 8 * n + c2 + e, col = col0 + jl;
            const float ls = slse[jl] * kLog2e, ds = sdot[jl];
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int r = r0 + 16 * mt + 8 * h, i = 2 * h + e;
                    p[mt][n][i] = !Masked || (col >= r && col < seq) ? exp2f(p[mt][n][i] * cl - ls) : 0.0f;
                    dp[mt][n][i] = p[mt][n][i] * (dp[mt][n][i] - ds);
                }
        }
}

// Wide::rows is the rows of a wide block's own tile: 4 warps of MT·16.
template <int MT> struct Wide {
    static constexpr int rows = 16 * MT * kWarps;
};

// QueryWarp is where a warp of a wide query-tile kernel (flash_fwd_w,
// flash_dq_w) stands: block (bh, reversed query tile qt of R rows), key
// tiles of N; w0 the warp's first row, klast the block's last key tile,
// wlast the warp's (-1 when all its rows lie at or beyond seq).
struct QueryWarp {
    u32 bh;
    int qt, warp, g, c, w0, klast, wlast;
    u64 head;
};

template <int D, int R, int MT, int N> __device__ __forceinline__ QueryWarp query_warp(int seq) {
    QueryWarp w;
    w.bh = blockIdx.x, w.qt = gridDim.y - 1 - blockIdx.y;
    w.warp = threadIdx.x >> 5, w.g = (threadIdx.x & 31) >> 2, w.c = threadIdx.x & 3;
    w.head = (u64)w.bh * (u64)seq * D;
    w.w0 = w.qt * R + 16 * MT * w.warp;
    w.klast = min((w.qt * R + R - 1) / N, (seq - 1) / N);
    w.wlast = w.w0 < seq ? min((w.w0 + 16 * MT - 1) / N, (seq - 1) / N) : -1;
    return w;
}

// start_tiles starts the copies of a wide query-tile block's own tiles
// (q, and dO unless null, R rows each at sq and sd) and of key tile 0 (K
// at skv, V after it) as one cp.async group.
template <int D, int R, int N>
__device__ __forceinline__ void start_tiles(const QueryWarp &w, u32 sq, const u16 *q, u32 sd, const u16 *dO, u32 skv,
                                            const u16 *k, const u16 *v, int seq) {
    load_tile_async<D, R>(sq, q + w.head, w.qt * R, seq);
    if (dO != nullptr) load_tile_async<D, R>(sd, dO + w.head, w.qt * R, seq);
    load_tile_async<D, N>(skv, k + w.head, 0, seq);
    load_tile_async<D, N>(skv + 2 * N * D, v + w.head, 0, seq);
    cp_async_commit();
}

// next_kv waits for key tile kt (K at skv + 4·N·D·(kt mod 2), V after it)
// and the block, then starts the copy of tile kt + 1 into the other buffer
// (up to klast), and returns tile kt's K address.
template <int D, int N>
__device__ __forceinline__ u32 next_kv(u32 skv, const u16 *k, const u16 *v, int kt, int klast, int seq) {
    cp_async_sync(); // tile kt is in; every warp is done with tile kt - 1
    if (kt < klast) {
        const u32 next = skv + 4 * N * D * ((kt + 1) & 1);
        load_tile_async<D, N>(next, k, (kt + 1) * N, seq);
        load_tile_async<D, N>(next + 2 * N * D, v, (kt + 1) * N, seq);
        cp_async_commit();
    }
    return skv + 4 * N * D * (kt & 1);
}

// flash_fwd_w: block (bh, reversed query tile of 128 rows), key tiles of
// N = 64 (the tiles of flash_fwd, so the same online softmax).
template <int D, int MT>
__device__ void flash_fwd_w(float *o, u64 ldo, u16 *o16, float *lse, const u16 *q, const u16 *k, const u16 *v, u32 heads,
                            u32 seq, float scale) {
    constexpr int N = kRows, R = Wide<MT>::rows;
    extern __shared__ uint4 smem_raw[];
    const u32 sq = smem_addr(smem_raw), skv = sq + 2 * R * D; // then K0, V0, K1, V1, each [N][D]
    const int iseq = (int)seq;
    const QueryWarp qw = query_warp<D, R, MT, N>(iseq);
    const u32 bh = qw.bh;
    const int warp = qw.warp, g = qw.g, c = qw.c, w0 = qw.w0;
    const u64 head = qw.head;
    start_tiles<D, R, N>(qw, sq, q, 0, nullptr, skv, k, v, iseq);
    const float cl = scale * kLog2e;
    float m[MT][2], l[MT][2], acc[MT][D / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        m[mt][0] = m[mt][1] = -INFINITY, l[mt][0] = l[mt][1] = 0;
#pragma unroll
        for (int n = 0; n < D / 8; n++) acc[mt][n][0] = acc[mt][n][1] = acc[mt][n][2] = acc[mt][n][3] = 0;
    }
    for (int kt = 0; kt <= qw.klast; kt++) {
        const u32 sk = next_kv<D, N>(skv, k + head, v + head, kt, qw.klast, iseq), sv = sk + 2 * N * D;
        if (kt > qw.wlast) continue;
        float s[MT][N / 8][4];
        rows_product_w<D, N, MT>(s, sq, 16 * MT * warp, sk);
        float mx[MT][2];
        if (kt * N + N - 1 > w0) // the diagonal tile(s) of the warp, or the ragged end
            scores<N, MT, true>(s, mx, cl, w0 + g, kt * N + 2 * c, iseq);
        else
            scores<N, MT, false>(s, mx, cl, w0 + g, kt * N + 2 * c, iseq);
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            float base[2], alpha[2];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const float mn = fmaxf(m[mt][h], quad_max(mx[mt][h]));
                base[h] = mn == -INFINITY ? 0.0f : mn;
                alpha[h] = exp2f(m[mt][h] - base[h]);
                m[mt][h] = mn;
                l[mt][h] *= alpha[h];
            }
#pragma unroll
            for (int n = 0; n < N / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    s[mt][n][e] = exp2f(s[mt][n][e] - base[e >> 1]);
                    l[mt][e >> 1] += s[mt][n][e];
                }
#pragma unroll
            for (int n = 0; n < D / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[mt][n][e] *= alpha[e >> 1];
        }
        accumulate_pv_w<D, N, MT>(acc, s, sv);
    }
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        const int r0 = w0 + 16 * mt;
        float inv[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            l[mt][h] = quad_sum(l[mt][h]);
            inv[h] = 1.0f / l[mt][h];
            const int r = r0 + g + 8 * h;
            if (c == 0 && r < iseq) lse[(u64)bh * seq + r] = (m[mt][h] + log2f(l[mt][h])) * kLn2;
        }
        store_rows<D>(o + rows_offset(bh, heads, seq, ldo, D), ldo, r0, iseq, acc[mt], inv);
        if (o16 == nullptr) continue;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int r = r0 + g + 8 * h;
            if (r >= iseq) continue;
            u16 *row = o16 + head + (u64)r * D;
#pragma unroll
            for (int n = 0; n < D / 8; n++)
                *reinterpret_cast<u32 *>(row + 8 * n + 2 * c) = pack2(acc[mt][n][2 * h] * inv[h], acc[mt][n][2 * h + 1] * inv[h]);
        }
    }
}

// flash_dq_w: block (bh, reversed query tile of 128 rows), key tiles of N
// rows (N = 32 for D = 128 so that the accumulators fit the registers; the
// products over the keys run in the same 16-key steps as flash_dq's).
template <int D, int N, int MT>
__device__ void flash_dq_w(float *dq, u64 ld, const u16 *q, const u16 *k, const u16 *v, const u16 *dO, const float *lse,
                           const float *dsum, u32 heads, u32 seq, float scale) {
    constexpr int R = Wide<MT>::rows;
    extern __shared__ uint4 smem_raw[];
    const u32 sq = smem_addr(smem_raw), sd = sq + 2 * R * D, skv = sd + 2 * R * D; // then K0, V0, K1, V1
    const int iseq = (int)seq;
    const QueryWarp qw = query_warp<D, R, MT, N>(iseq);
    const u32 bh = qw.bh;
    const int warp = qw.warp, g = qw.g, c = qw.c, w0 = qw.w0;
    const u64 head = qw.head;
    start_tiles<D, R, N>(qw, sq, q, sd, dO, skv, k, v, iseq);
    const float cl = scale * kLog2e;
    float rl[MT][2], rd[MT][2], acc[MT][D / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int r = w0 + 16 * mt + g + 8 * h;
            rl[mt][h] = r < iseq ? lse[(u64)bh * seq + r] * kLog2e : 0.0f;
            rd[mt][h] = r < iseq ? dsum[(u64)bh * seq + r] : 0.0f;
        }
#pragma unroll
        for (int n = 0; n < D / 8; n++) acc[mt][n][0] = acc[mt][n][1] = acc[mt][n][2] = acc[mt][n][3] = 0;
    }
    for (int kt = 0; kt <= qw.klast; kt++) {
        const u32 sk = next_kv<D, N>(skv, k + head, v + head, kt, qw.klast, iseq), sv = sk + 2 * N * D;
        if (kt > qw.wlast) continue;
        float p[MT][N / 8][4], dp[MT][N / 8][4];
        rows_product_w<D, N, MT>(p, sq, 16 * MT * warp, sk);
        rows_product_w<D, N, MT>(dp, sd, 16 * MT * warp, sv);
        if (kt * N + N - 1 > w0)
            dscores<N, MT, true>(p, dp, rl, rd, cl, w0 + g, kt * N + 2 * c, iseq);
        else
            dscores<N, MT, false>(p, dp, rl, rd, cl, w0 + g, kt * N + 2 * c, iseq);
        accumulate_pv_w<D, N, MT>(acc, p, sk); // dQ += dS·K
    }
    const float sc[2] = {scale, scale};
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
        store_rows<D>(dq + rows_offset(bh, heads, seq, ld, D), ld, w0 + 16 * mt, iseq, acc[mt], sc);
}

// The dS tiles of the _ds variant: per head, the 64 x 64 tiles (query
// tile a, key tile b <= a) of the lower triangle, tile (a, b) at index
// a(a+1)/2 + b, each [key mod 64][query mod 64] bfloat16, row-major (dSᵀ,
// the score gradient rounded as the dK and dQ products round it; load_tile
// swizzles it into shared memory). Elements outside the causal triangle or
// beyond seq hold zeros.

// ds_tiles returns the first dS tile of head bh.
__device__ __forceinline__ u16 *ds_tiles(u16 *ds, u32 bh, int seq) {
    const u64 nt = (u64)(seq + 63) / 64;
    return ds + (u64)bh * (nt * (nt + 1) / 2) * 4096;
}

// store_ds writes the dSᵀ C fragments dp (one m-tile: key rows r0 = w0 +
// g and r0 + 8, query columns col0 = first + 2c and on) rounded to
// bfloat16 into the dS tiles of a head.
template <int BQ> __device__ __forceinline__ void store_ds(u16 *tiles, const float (*dp)[4], int r0, int col0) {
#pragma unroll
    for (int n = 0; n < BQ / 8; n++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int r = r0 + 8 * h, col = col0 + 8 * n, a = col >> 6, b = r >> 6;
            u16 *tile = tiles + (u64)(a * (a + 1) / 2 + b) * 4096;
            *reinterpret_cast<u32 *>(tile + (r & 63) * 64 + (col & 63)) = pack2(dp[n][2 * h], dp[n][2 * h + 1]);
        }
}

// flash_dkdv_w: block (bh, reversed key tile of R = 64·MT rows), query
// tiles of BQ rows (with their lse and dsum) double-buffered, from the
// diagonal to the last; dK and dV summed over the query rows in the 16-row
// steps of flash_dkdv.
template <int D, int BQ, int MT, bool Store = false>
__device__ void flash_dkdv_w(float *dk, float *dv, u64 ld, const u16 *q, const u16 *k, const u16 *v, const u16 *dO,
                             const float *lse, const float *dsum, u32 heads, u32 seq, float scale, u16 *ds = nullptr) {
    constexpr int R = Wide<MT>::rows;
    constexpr u32 stage = 2 * 2 * BQ * D + 2 * 4 * BQ; // Q, dO, lse, dsum of one query tile
    extern __shared__ uint4 smem_raw[];
    const u32 sk = smem_addr(smem_raw), sv = sk + 2 * R * D, sbuf = sv + 2 * R * D;
    const float *fbuf = reinterpret_cast<const float *>(reinterpret_cast<const char *>(smem_raw) + 4 * R * D);
    const u32 bh = blockIdx.x;
    const int kt = gridDim.y - 1 - blockIdx.y, iseq = (int)seq;
    const int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, c = threadIdx.x & 3;
    const u64 head = (u64)bh * seq * D;
    const int w0 = kt * R + 16 * MT * warp; // the warp's first key row
    const int first = kt * R / BQ, last = (iseq - 1) / BQ;
    // The warp skips query tiles that end before its first key row (with
    // Store none: every element of the dS tiles is written).
    const int wfirst = Store ? first : w0 < iseq ? w0 / BQ : last + 1;
    const float *glse = lse + (u64)bh * seq, *gsum = dsum + (u64)bh * seq;
    auto load = [&](int it) {
        const u32 b = sbuf + stage * (it & 1);
        load_tile_async<D, BQ>(b, q + head, it * BQ, iseq);
        load_tile_async<D, BQ>(b + 2 * BQ * D, dO + head, it * BQ, iseq);
        load_stats_async<BQ>(b + 4 * BQ * D, glse, it * BQ, iseq);
        load_stats_async<BQ>(b + 4 * BQ * D + 4 * BQ, gsum, it * BQ, iseq);
        cp_async_commit();
    };
    load_tile_async<D, R>(sk, k + head, kt * R, iseq);
    load_tile_async<D, R>(sv, v + head, kt * R, iseq);
    load(first);
    const float cl = scale * kLog2e;
    float gk[MT][D / 8][4], gv[MT][D / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int n = 0; n < D / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) gk[mt][n][e] = gv[mt][n][e] = 0;
    for (int it = first; it <= last; it++) {
        cp_async_sync();
        if (it < last) load(it + 1);
        if (it < wfirst) continue;
        const u32 sq = sbuf + stage * (it & 1), sd = sq + 2 * BQ * D;
        const float *slse = fbuf + (stage / 4) * (it & 1) + BQ * D, *sdot = slse + BQ;
        float p[MT][BQ / 8][4], dp[MT][BQ / 8][4];
        rows_product_w<D, BQ, MT>(p, sk, 16 * MT * warp, sq); // Sᵀ: keys x queries
        rows_product_w<D, BQ, MT>(dp, sv, 16 * MT * warp, sd); // dPᵀ = V·dOᵀ
        // Unmasked: every query of the tile at or after the warp's last key, and below seq.
        if (it * BQ < w0 + 16 * MT - 1 || it * BQ + BQ > iseq)
            tscores<BQ, MT, true>(p, dp, slse, sdot, cl, w0 + g, 2 * c, it * BQ, iseq);
        else
            tscores<BQ, MT, false>(p, dp, slse, sdot, cl, w0 + g, 2 * c, it * BQ, iseq);
        if (Store) store_ds<BQ>(ds_tiles(ds, bh, iseq), dp[0], w0 + g, it * BQ + 2 * c);
        accumulate_pv_w<D, BQ, MT>(gv, p, sd);  // dV += Pᵀ·dO
        accumulate_pv_w<D, BQ, MT>(gk, dp, sq); // dK += dSᵀ·Q
    }
    const float one[2] = {1.0f, 1.0f}, sc[2] = {scale, scale};
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        store_rows<D>(dk + rows_offset(bh, heads, seq, ld, D), ld, w0 + 16 * mt, iseq, gk[mt], sc);
        store_rows<D>(dv + rows_offset(bh, heads, seq, ld, D), ld, w0 + 16 * mt, iseq, gv[mt], one);
    }
}

// flash_dq_ds: block (bh, reversed query tile a of 64 rows), 4 warps of 16
// rows: dq = scale·Σ_{b<=a} dS(a, b)·K_b from the dS tiles that
// flash_dkdv_w<..., true> stored, the tile and K_b double-buffered by
// cp.async; the A fragments by ldmatrix.trans of the dSᵀ tile. The sum
// runs over the keys in flash_dq's 16-key steps.
template <int D>
__device__ void flash_dq_ds(float *dq, u64 ld, const u16 *k, const u16 *ds, u32 heads, u32 seq, float scale) {
    constexpr u32 stage = 2 * 64 * 64 + 2 * 64 * D; // a dS tile, a K tile
    extern __shared__ uint4 smem_raw[];
    const u32 base = smem_addr(smem_raw), bh = blockIdx.x;
    const int a = gridDim.y - 1 - blockIdx.y, iseq = (int)seq;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, m = lane >> 3;
    const u16 *tiles = ds_tiles(const_cast<u16 *>(ds), bh, iseq) + (u64)(a * (a + 1) / 2) * 4096;
    const u16 *kh = k + (u64)bh * seq * D;
    auto load = [&](int b) {
        const u32 st = base + stage * (b & 1);
        load_tile_async<64, 64>(st, tiles + (u64)b * 4096, 0, 64);
        load_tile_async<D, 64>(st + 2 * 64 * 64, kh, b * 64, iseq);
        cp_async_commit();
    };
    load(0);
    float acc[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0;
    for (int b = 0; b <= a; b++) {
        cp_async_sync();
        if (b < a) load(b + 1);
        const u32 st = base + stage * (b & 1), sk = st + 2 * 64 * 64;
#pragma unroll
        for (int kk = 0; kk < 64; kk += 16) {
            u32 af[4]; // A (16 queries x 16 keys) from the dSᵀ tile, transposed
            ldsm4<true>(af, st + 2 * sidx<64>(kk + 8 * (m >> 1) + (lane & 7), 16 * warp + 8 * (m & 1)));
#pragma unroll
            for (int n = 0; n < D / 8; n += 2) {
                u32 bf[4];
                ldsm4<true>(bf, sk + 2 * sidx<D>(kk + 8 * (m & 1) + (lane & 7), 8 * n + 8 * (m >> 1)));
                mmaw(acc[n], af, bf[0], bf[1]);
                mmaw(acc[n + 1], af, bf[2], bf[3]);
            }
        }
    }
    const float sc[2] = {scale, scale};
    store_rows<D>(dq + rows_offset(bh, heads, seq, ld, D), ld, a * 64 + 16 * warp, iseq, acc, sc);
}

} // namespace flashk

using namespace flashk;

// Entry points. Every tile kernel comes in the variants of flash.go's
// flashVariant: the plain name is the first kernels above, _pipe, _wide and
// _ds those of "The wide kernels"; all compute the same products in the
// same order, so they give the same bits (the tests run every variant;
// flash.go picks the launchers').
//
// FLASH_FWD(name, fn) defines kernel name calling the device function fn
// (a template instance: the variadic argument keeps its commas); likewise
// FLASH_DKDV and FLASH_DQ.
#define FLASH_FWD(name, ...)                                                                                       \
    extern "C" __global__ void __launch_bounds__(kThreads)                                                         \
        name(float *o, u64 ldo, u16 *o16, float *lse, const u16 *q, const u16 *k, const u16 *v, u32 heads, u32 seq, \
             float scale) {                                                                                        \
        __VA_ARGS__(o, ldo, o16, lse, q, k, v, heads, seq, scale);                                                 \
    }
#define FLASH_DKDV(name, ...)                                                                                      \
    extern "C" __global__ void __launch_bounds__(kThreads)                                                         \
        name(float *dk, float *dv, u64 ld, const u16 *q, const u16 *k, const u16 *v, const u16 *do16,               \
             const float *lse, const float *dsum, u32 heads, u32 seq, float scale) {                               \
        __VA_ARGS__(dk, dv, ld, q, k, v, do16, lse, dsum, heads, seq, scale);                                      \
    }
#define FLASH_DQ(name, ...)                                                                                        \
    extern "C" __global__ void __launch_bounds__(kThreads)                                                         \
        name(float *dq, u64 ld, const u16 *q, const u16 *k, const u16 *v, const u16 *do16, const float *lse,        \
             const float *dsum, u32 heads, u32 seq, float scale) {                                                 \
        __VA_ARGS__(dq, ld, q, k, v, do16, lse, dsum, heads, seq, scale);                                          \
    }

// flash_fwd_d64, flash_fwd_d128: causal attention of head width
// D, grid (ceil(seq/64), batch·heads), 128 threads, dynamic shared memory
// 3·64·D·2 bytes. For every (bh, query row i < seq), with
// s_j = scale·q_i·k_j and the softmax over j <= i:
//   lse[bh·seq + i] = log Σ_{j<=i} exp(s_j) (natural logarithm)
//   o[i] = Σ_{j<=i} exp(s_j - lse)·v_j, written to the rows layout o, ldo
//   o16 (optional, may be null): the same rounded to bfloat16, packed.
// q, k, v packed bfloat16 [batch·heads, seq, D], 16-byte aligned; o
// 8-byte aligned, ldo even.

// flash_bwd_dkdv_d64, flash_bwd_dkdv_d128: grid (ceil(seq/64),
// batch·heads), 128 threads; one block per 64 keys loops over the query
// tiles (64 rows for D = 64, 32 for D = 128) from its diagonal on:
//   p_ij = exp(scale·q_i·k_j - lse_i) for j <= i < seq, ds_ij = p_ij·(dO_i·v_j - dsum_i)
//   dv_j = Σ_i p_ij·dO_i,  dk_j = scale·Σ_i ds_ij·q_i
// written to the rows layout (dk, dv, ld). do16 and dsum from
// flash_bwd_prep, lse from flash_fwd.

// flash_bwd_dq_d64, flash_bwd_dq_d128: grid (ceil(seq/64),
// batch·heads), 128 threads; one block per 64 queries loops over the key
// tiles up to its diagonal: dq_i = scale·Σ_{j<=i} ds_ij·k_j (ds as in
// flash_bwd_dkdv).

// The pipe and wide entry points (see "The wide kernels"): the arguments,
// outputs and bits of the kernels above, grid (batch·heads, ceil(seq/R)),
// 128 threads, R the block's own rows.
// _pipe: one m-tile per warp (blocks of 64 rows) with the cp.async double
// buffers, unmasked inner tiles and the longest-first grid. Shared memory:
// forward (64 + 4·64)·D·2 bytes, dQ (2·64 + 4·64)·D·2, dK/dV (BQ = 64 for
// D = 64, 32 for D = 128) 4·64·D + 2·(4·BQ·D + 8·BQ).

// _wide: two m-tiles per warp (blocks of 128 rows). Forward key tiles of
// 64, shared (128 + 4·64)·D·2 bytes; dQ key tiles of 64 (D = 64) or 32 (D
// = 128), shared (2·128 + 4·N)·D·2; dK/dV at D = 64 query tiles of 32,
// shared 4·128·D + 2·(4·32·D + 256). At D = 128 the dK and dV accumulators
// of 32 rows would not fit the registers: there the wide dK/dV kernel has
// one m-tile a warp and query tiles of 64 (shared 4·64·D + 2·(4·64·D +
// 512)).

// _ds: the dK/dV kernel of _pipe that also stores dSᵀ (rounded to
// bfloat16) into the dS tiles ds (see ds_tiles; 2·batch·heads·t(t+1)/2·4096
// bytes, t = ceil(seq/64)), and a dQ kernel that reads them instead of
// recomputing the scores: dQ costs one product instead of three. The
// arguments are those of the other variants and ds; flash_bwd_dq_*_ds
// reads only dq, ld, k, heads, seq, scale and ds. Shared memory: dK/dV as
// _pipe; dQ 2·(2·64·64 + 2·64·D) bytes.
#define FLASH_DKDV_DS(name, ...)                                                                                   \
    extern "C" __global__ void __launch_bounds__(kThreads)                                                         \
        name(float *dk, float *dv, u64 ld, const u16 *q, const u16 *k, const u16 *v, const u16 *do16,               \
             const float *lse, const float *dsum, u32 heads, u32 seq, float scale, u16 *ds) {                      \
        __VA_ARGS__(dk, dv, ld, q, k, v, do16, lse, dsum, heads, seq, scale, ds);                                  \
    }
#define FLASH_DQ_DS(name, D)                                                                                       \
    extern "C" __global__ void __launch_bounds__(kThreads)                                                         \
        name(float *dq, u64 ld, const u16 *q, const u16 *k, const u16 *v, const u16 *do16, const float *lse,        \
             const float *dsum, u32 heads, u32 seq, float scale, const u16 *ds) {                                  \
        flash_dq_ds<D>(dq, ld, k, ds, heads, seq, scale);                                                          \
    }
