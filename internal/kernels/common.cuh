// common.cuh: helpers shared by every kernel of distopt.
//
// Kernels are written as grid-stride loops, so that any grid size is correct
// and the Go launchers pick the grid for speed alone. Sizes and indices are
// 64-bit. No header of the CUDA toolkit is needed.
#pragma once

namespace distopt {

typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned char u8;

// Global index of the calling thread and the stride of a grid-stride loop.
__device__ __forceinline__ u64 thread_index() {
    return (u64)blockIdx.x * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ u64 grid_stride() { return (u64)gridDim.x * blockDim.x; }

// aligned reports whether p is a multiple of n bytes (n a power of two).
__device__ __forceinline__ bool aligned(const void *p, u64 n) {
    return ((u64)p & (n - 1)) == 0;
}

// amax_bits returns the bits of |x|: the key by which amaxes are ordered
// (NaN above +Inf above every finite value, larger payloads above smaller).
__device__ __forceinline__ u32 amax_bits(float x) { return __float_as_uint(x) & 0x7fffffffu; }

// block_max_atomic folds v, one value per thread of the block, into *out with
// atomicMax. Every thread of the block must call it (it synchronizes the
// block); blocks of at most 1024 threads.
__device__ __forceinline__ void block_max_atomic(u32 *out, u32 v) {
    __shared__ u32 warp_max[32];
    v = __reduce_max_sync(0xffffffffu, v);
    const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) warp_max[warp] = v;
    __syncthreads();
    if (warp == 0) {
        const u32 nwarps = (blockDim.x + 31) >> 5;
        v = lane < nwarps ? warp_max[lane] : 0;
        v = __reduce_max_sync(0xffffffffu, v);
        if (lane == 0 && v != 0) atomicMax(out, v);
    }
}

} // namespace distopt
