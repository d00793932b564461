// stepctl.cuh: the step control block (optimizer/backend.Control), which
// the control kernel (stepctl.cu) writes from a step's reduced gradient
// statistics and the update, scale and cast kernels read through a pointer:
// the gradient scale of the step, and the skip flag that makes them write
// nothing (a step with non-finite gradients).
#pragma once
#include "common.cuh"

namespace distopt {

// StepCtl is backend.Control, field for field (112 bytes; the offsets of
// gs and skip are backend.ControlGradScaleOff and ControlSkipOff).
struct StepCtl {
    double max_norm;                            // 0: no clipping
    double growth, backoff, min_scale, max_scale; // growth 0: no loss scaler
    long long interval;
    double scale;     // loss scale of the next step's gradients
    long long good;   // finite steps since the scale last changed
    long long step;   // steps taken
    double used;      // loss scale of the last step's gradients
    double norm;      // its global gradient norm (+Inf when skipped)
    double clip;      // its clip coefficient
    long long nonfinite;
    float gs;         // float32(clip / used)
    u32 skip;         // 1: the step is skipped, nothing may be written
};

// ctl_skip reports whether the step of ctl (null outside a step) is skipped.
__device__ __forceinline__ bool ctl_skip(const StepCtl *ctl) { return ctl != nullptr && ctl->skip != 0; }

} // namespace distopt
