// Package kernels provides the GPU kernels of distopt's optimizer and FP8
// GEMMs (the step, the casts, the gradient statistics, the FP8 gradients,
// quantization and transposes): CUDA C sources in this directory, the PTX
// generated from them (ptx/) and its machine code (cubin/), both committed
// and embedded, and typed Go launchers that queue them on a cuda.Stream.
// The GPT example's kernels are its own (examples/gpt/kernels); they share
// the headers bf16.cuh and common.cuh of this directory.
//
// # Layout
//
// One .cu file per concept (fp8.cu, bf16.cu, fill.cu, ...), sharing device
// helpers through .cuh headers. Launchers live in a Go file per concept:
// bf16.go, fill.go, fp8.go and scales.go launch the kernels of the .cu file
// of the same name; update.go launches those of the step (update.cu,
// segcast.cu and gradstats.cu), over the segment tables packed by
// segment.go. Each .cu file becomes one module per Variant. To add
// kernels: write them (extern "C" __global__) in a .cu file, run `go
// generate ./internal/kernels`, and add launchers that call Set.function with the
// kernel's name; TestEntries checks that every name a launcher uses exists
// in every variant.
//
// # Variants
//
// The PTX is generated twice by nvcc 11.8 (gen.sh): for compute_80, where
// the FP8 conversions are integer code, and for compute_90, where they are
// the hardware instructions cvt.rn.satfinite.{e4m3,e5m2}x2.f32 and
// cvt.rn.f16x2.{e4m3,e5m2}x2. Load picks by the device's compute capability;
// LoadVariant loads a given one (the compute_80 PTX also runs on 9.0
// devices, which is how the tests check the software path against the
// hardware).
//
// # Machine code
//
// gen.sh also compiles each variant's PTX with ptxas (-fmad=false, as the
// PTX) for the architecture it targets: sm_80 for the compute_80 PTX,
// sm_90 for compute_90. A Set loads those cubins on a device they run on
// (8.x, 9.0) and starts in a fraction of a second; on other devices (and
// for the sm80 variant on a 9.0 GPU) the driver JIT-compiles the PTX, which
// takes about a minute on a fresh machine before its cache holds the
// result. A module named in a file ptxonly would ship without a cubin,
// where the driver's JIT makes faster code than ptxas 11.8 (none here;
// examples/gpt/kernels ships flash so). DISTOPT_CUDA_PTX=1 forces the PTX
// of every module (cuda.EnvPTX); Set.Images says
// what each module was loaded from. Only the kernels some launcher can
// request are built (TestKernelsReachable): every one costs start-up time
// and binary size.
//
// # Semantics
//
// Every launcher's doc states the computation exactly; the functions of the
// fp8 package are the reference, and the GPU tests compare the kernels with
// them bit for bit, over all 2^32 float32 inputs for the conversions.
// Launchers only queue work: errors of the kernels themselves surface at the
// next synchronization of the stream.
package kernels
