// flash.cu: fused causal attention (the FlashAttention-2 algorithm) on the
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
// of P·V, dS·K, Pᵀ·dO, dSᵀ·Q, whose tiles are stored k-major), or in the
// _lds twins by 32- and 16-bit loads of the same elements. Not yet done:
// cp.async double buffering of the streamed tiles, and Hopper's wgmma.
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
#include "bf16.cuh"

using namespace distopt;

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kRows = 16 * kWarps; // rows of a block's own tile
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// sidx is the element index of (r, col) in a swizzled [rows][D] tile.
template <int D> __device__ __forceinline__ int sidx(int r, int col) {
    return r * D + ((((col >> 3) ^ (r & 7))) << 3) + (col & 7);
}

// pair loads the bfloat16 pair (r, col), (r, col+1) of a tile, col even.
template <int D> __device__ __forceinline__ u32 pair(const u16 *s, int r, int col) {
    return *reinterpret_cast<const u32 *>(s + sidx<D>(r, col));
}

// tpair loads (r, col), (r+1, col): two rows of one column.
template <int D> __device__ __forceinline__ u32 tpair(const u16 *s, int r, int col) {
    return (u32)s[sidx<D>(r, col)] | (u32)s[sidx<D>(r + 1, col)] << 16;
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
// shared tile: with Ldm one ldmatrix.x4 (matrices: rows r0.., r0+8.. at
// columns k0, then the same at k0+8), else four 32-bit loads.
template <int D, bool Ldm> __device__ __forceinline__ void load_a(u32 *a, const u16 *s, int r0, int k0) {
    const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    if (Ldm) {
        const int m = lane >> 3;
        ldm4<false>(a, s + sidx<D>(r0 + 8 * (m & 1) + (lane & 7), k0 + 8 * (m >> 1)));
        return;
    }
    a[0] = pair<D>(s, r0 + g, k0 + 2 * c);
    a[1] = pair<D>(s, r0 + g + 8, k0 + 2 * c);
    a[2] = pair<D>(s, r0 + g, k0 + 2 * c + 8);
    a[3] = pair<D>(s, r0 + g + 8, k0 + 2 * c + 8);
}

// rows_product: acc[N/8][4] = A·Bᵀ for A rows a0..a0+15 of sa and B rows
// 0..N-1 of sb (both [.][D] shared tiles): the scores of 16 rows against N
// columns, the reduction over D. With Ldm the B fragments of two n-tiles
// come from one ldmatrix.x4 (rows 8n.. at columns k and k+8, then rows
// 8n+8.. at the same).
template <int D, int N, bool Ldm>
__device__ __forceinline__ void rows_product(float (*acc)[4], const u16 *sa, int a0, const u16 *sb) {
    const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3, m = lane >> 3;
#pragma unroll
    for (int n = 0; n < N / 8; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0;
#pragma unroll
    for (int k = 0; k < D; k += 16) {
        u32 a[4];
        load_a<D, Ldm>(a, sa, a0, k);
#pragma unroll
        for (int n = 0; n < N / 8; n += 2) {
            u32 b[4];
            if (Ldm) {
                ldm4<false>(b, sb + sidx<D>(8 * n + 8 * (m >> 1) + (lane & 7), k + 8 * (m & 1)));
            } else {
                b[0] = pair<D>(sb, 8 * n + g, k + 2 * c), b[1] = pair<D>(sb, 8 * n + g, k + 2 * c + 8);
                b[2] = pair<D>(sb, 8 * n + 8 + g, k + 2 * c), b[3] = pair<D>(sb, 8 * n + 8 + g, k + 2 * c + 8);
            }
            mma(acc[n], a, b[0], b[1]);
            mma(acc[n + 1], a, b[2], b[3]);
        }
    }
}

// accumulate_pv: out[D/8][4] += P·V for P 16 x N in C fragments (rounded to
// bfloat16 here) and V rows 0..N-1 of the shared tile sv. With Ldm the B
// fragments of two n-tiles come from one ldmatrix.x4.trans (rows 16k..
// and 16k+8.. at column 8n, then the same at 8n+8), else from 16-bit loads.
template <int D, int N, bool Ldm>
__device__ __forceinline__ void accumulate_pv(float (*out)[4], const float (*p)[4], const u16 *sv) {
    const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3, m = lane >> 3;
#pragma unroll
    for (int k = 0; k < N / 16; k++) {
        const u32 a[4] = {pack2(p[2 * k][0], p[2 * k][1]), pack2(p[2 * k][2], p[2 * k][3]),
                          pack2(p[2 * k + 1][0], p[2 * k + 1][1]), pack2(p[2 * k + 1][2], p[2 * k + 1][3])};
#pragma unroll
        for (int n = 0; n < D / 8; n += 2) {
            u32 b[4];
            if (Ldm) {
                ldm4<true>(b, sv + sidx<D>(16 * k + 8 * (m & 1) + (lane & 7), 8 * n + 8 * (m >> 1)));
            } else {
                b[0] = tpair<D>(sv, 16 * k + 2 * c, 8 * n + g), b[1] = tpair<D>(sv, 16 * k + 2 * c + 8, 8 * n + g);
                b[2] = tpair<D>(sv, 16 * k + 2 * c, 8 * n + 8 + g), b[3] = tpair<D>(sv, 16 * k + 2 * c + 8, 8 * n + 8 + g);
            }
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
template <int D, bool Ldm>
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
        rows_product<D, kRows, Ldm>(s, sq, 16 * warp, sk);
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
        accumulate_pv<D, kRows, Ldm>(acc, s, sv);
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
template <int D, int BQ, bool Ldm>
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
        rows_product<D, BQ, Ldm>(p, sk, 16 * warp, sq); // Sᵀ: keys x queries
        rows_product<D, BQ, Ldm>(dp, sv, 16 * warp, sd); // dPᵀ = V·dOᵀ
#pragma unroll
        for (int n = 0; n < BQ / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = r0 + g + 8 * (e >> 1), jl = 8 * n + 2 * c + (e & 1), col = it * BQ + jl;
                const bool ok = col >= r && col < (int)seq;
                p[n][e] = ok ? exp2f(p[n][e] * cl - slse[jl]) : 0.0f;
                dp[n][e] = p[n][e] * (dp[n][e] - sdot[jl]);
            }
        accumulate_pv<D, BQ, Ldm>(gv, p, sd);  // dV += Pᵀ·dO
        accumulate_pv<D, BQ, Ldm>(gk, dp, sq); // dK += dSᵀ·Q
    }
    const float one[2] = {1.0f, 1.0f}, sc[2] = {scale, scale};
    store_rows<D>(dk + rows_offset(bh, heads, seq, ld, D), ld, r0, seq, gk, sc);
    store_rows<D>(dv + rows_offset(bh, heads, seq, ld, D), ld, r0, seq, gv, one);
}

// flash_dq: block (query tile, bh); see flash_bwd_dq_d64.
template <int D, bool Ldm>
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
        rows_product<D, kRows, Ldm>(p, sq, 16 * warp, sk);
        rows_product<D, kRows, Ldm>(dp, sd, 16 * warp, sv);
#pragma unroll
        for (int n = 0; n < kRows / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int h = e >> 1, r = r0 + g + 8 * h, col = kt * kRows + 8 * n + 2 * c + (e & 1);
                const bool ok = col <= r && col < (int)seq;
                const float pe = ok ? exp2f(p[n][e] * cl - rl[h]) : 0.0f;
                p[n][e] = pe * (dp[n][e] - rd[h]);
            }
        accumulate_pv<D, kRows, Ldm>(acc, p, sk); // dQ += dS·K
    }
    const float sc[2] = {scale, scale};
    store_rows<D>(dq + rows_offset(bh, heads, seq, ld, D), ld, r0, seq, acc, sc);
}

} // namespace

// Entry points. Every kernel comes twice: the plain name loads the
// fragments with ldmatrix, the _lds twin with 32- and 16-bit shared loads;
// both compute the same products in the same order, so they give the same
// bits (the launchers take the ldmatrix kernels; the tests run both).
#define FLASH_FWD(name, D, Ldm)                                                                                    \
    extern "C" __global__ void __launch_bounds__(kThreads)                                                         \
        name(float *o, u64 ldo, u16 *o16, float *lse, const u16 *q, const u16 *k, const u16 *v, u32 heads, u32 seq, \
             float scale) {                                                                                        \
        flash_fwd<D, Ldm>(o, ldo, o16, lse, q, k, v, heads, seq, scale);                                           \
    }
#define FLASH_DKDV(name, D, BQ, Ldm)                                                                               \
    extern "C" __global__ void __launch_bounds__(kThreads)                                                         \
        name(float *dk, float *dv, u64 ld, const u16 *q, const u16 *k, const u16 *v, const u16 *do16,               \
             const float *lse, const float *dsum, u32 heads, u32 seq, float scale) {                               \
        flash_dkdv<D, BQ, Ldm>(dk, dv, ld, q, k, v, do16, lse, dsum, heads, seq, scale);                           \
    }
#define FLASH_DQ(name, D, Ldm)                                                                                     \
    extern "C" __global__ void __launch_bounds__(kThreads)                                                         \
        name(float *dq, u64 ld, const u16 *q, const u16 *k, const u16 *v, const u16 *do16, const float *lse,        \
             const float *dsum, u32 heads, u32 seq, float scale) {                                                 \
        flash_dq<D, Ldm>(dq, ld, q, k, v, do16, lse, dsum, heads, seq, scale);                                     \
    }

// flash_fwd_d64, flash_fwd_d128 (and _lds): causal attention of head width
// D, grid (ceil(seq/64), batch·heads), 128 threads, dynamic shared memory
// 3·64·D·2 bytes. For every (bh, query row i < seq), with
// s_j = scale·q_i·k_j and the softmax over j <= i:
//   lse[bh·seq + i] = log Σ_{j<=i} exp(s_j) (natural logarithm)
//   o[i] = Σ_{j<=i} exp(s_j - lse)·v_j, written to the rows layout o, ldo
//   o16 (optional, may be null): the same rounded to bfloat16, packed.
// q, k, v packed bfloat16 [batch·heads, seq, D], 16-byte aligned; o
// 8-byte aligned, ldo even.
FLASH_FWD(flash_fwd_d64, 64, true)
FLASH_FWD(flash_fwd_d128, 128, true)
FLASH_FWD(flash_fwd_d64_lds, 64, false)
FLASH_FWD(flash_fwd_d128_lds, 128, false)

// flash_bwd_prep: one warp per row r < rows (= batch·heads·seq; bh = r /
// seq, t = r mod seq) of head width d (a multiple of 8): do16[r] = dO's
// row rounded to bfloat16 (from the rows layout dO, lddo), dsum[r] =
// Σ_c do16[r][c]·o16[r][c] (lanes over c in steps of 32, then a
// butterfly). The statistic D of FlashAttention-2's backward.
extern "C" __global__ void flash_bwd_prep(u16 *do16, float *dsum, const float *dO, u64 lddo, const u16 *o16, u32 heads,
                                          u32 seq, u32 d, u64 rows) {
    const u32 lane = threadIdx.x & 31;
    for (u64 r = thread_index() >> 5; r < rows; r += grid_stride() >> 5) {
        const u32 bh = (u32)(r / seq), t = (u32)(r % seq);
        const float *src = dO + rows_offset(bh, heads, seq, lddo, d) + (u64)t * lddo;
        float s = 0;
        for (u32 col = lane; col < d; col += 32) {
            const u32 b = bf16_rn(src[col]);
            do16[r * d + col] = (u16)b;
            s += bf16_to_f32(b) * bf16_to_f32(o16[r * d + col]);
        }
        for (int w = 16; w > 0; w >>= 1) s += __shfl_xor_sync(0xffffffffu, s, w);
        if (lane == 0) dsum[r] = s;
    }
}

// flash_bwd_dkdv_d64, flash_bwd_dkdv_d128 (and _lds): grid (ceil(seq/64),
// batch·heads), 128 threads; one block per 64 keys loops over the query
// tiles (64 rows for D = 64, 32 for D = 128) from its diagonal on:
//   p_ij = exp(scale·q_i·k_j - lse_i) for j <= i < seq, ds_ij = p_ij·(dO_i·v_j - dsum_i)
//   dv_j = Σ_i p_ij·dO_i,  dk_j = scale·Σ_i ds_ij·q_i
// written to the rows layout (dk, dv, ld). do16 and dsum from
// flash_bwd_prep, lse from flash_fwd.
FLASH_DKDV(flash_bwd_dkdv_d64, 64, 64, true)
FLASH_DKDV(flash_bwd_dkdv_d128, 128, 32, true)
FLASH_DKDV(flash_bwd_dkdv_d64_lds, 64, 64, false)
FLASH_DKDV(flash_bwd_dkdv_d128_lds, 128, 32, false)

// flash_bwd_dq_d64, flash_bwd_dq_d128 (and _lds): grid (ceil(seq/64),
// batch·heads), 128 threads; one block per 64 queries loops over the key
// tiles up to its diagonal: dq_i = scale·Σ_{j<=i} ds_ij·k_j (ds as in
// flash_bwd_dkdv).
FLASH_DQ(flash_bwd_dq_d64, 64, true)
FLASH_DQ(flash_bwd_dq_d128, 128, true)
FLASH_DQ(flash_bwd_dq_d64_lds, 64, false)
FLASH_DQ(flash_bwd_dq_d128_lds, 128, false)
