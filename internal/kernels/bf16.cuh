// bf16.cuh: bfloat16 <-> float32 of distopt (the fp8 package's BF16FromFloat32
// and Float32FromBF16).
#pragma once
#include "common.cuh"

namespace distopt {

// bf16_rn returns the bfloat16 nearest x (ties to even) by the hardware
// instruction cvt.rn.bf16.f32 (compute capability 8.0 and up): overflow
// rounds to +-Inf as IEEE says, every NaN gives 0x7fff.
__device__ __forceinline__ u32 bf16_rn(float x) {
    u16 r;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(x));
    return r;
}

// bf16_to_f32 widens a bfloat16 exactly (NaN payloads kept).
__device__ __forceinline__ float bf16_to_f32(u32 h) { return __uint_as_float(h << 16); }

} // namespace distopt
