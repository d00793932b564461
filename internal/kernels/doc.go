// Package kernels provides the GPU kernels of distopt's optimizer and FP8
// GEMMs, and typed Go launchers that queue them on a cuda.Stream. The
// kernels are the step, the casts, the gradient statistics, the FP8
// gradients, quantization and transposes. They are CUDA C sources in this
// directory. Their PTX, in ptx/, and their machine code, in cubin/, are
// generated, committed and embedded.
//
// The GPT example's kernels are its own, in examples/gpt/kernels. They share
// the headers bf16.cuh and common.cuh of this directory.
//
// # Layout
//
// There is one .cu file per concept: fp8.cu, bf16.cu, fill.cu and so on.
// They share device helpers through .cuh headers. The launchers live in a Go
// file per concept. bf16.go, fill.go, fp8.go and scales.go launch the
// kernels of the .cu file of the same name. update.go launches those of the
// step: update.cu, segcast.cu and gradstats.cu. They run over the segment
// tables that segment.go packs. Each .cu file becomes one module per
// Variant.
//
// To add kernels:
//
//  1. Write them, extern "C" __global__, in a .cu file.
//  2. Run `go generate ./internal/kernels`.
//  3. Add launchers that call Set.function with the kernel's name.
//
// TestEntries checks that every name a launcher uses exists in every
// variant. Only the kernels some launcher can request are built
// (TestKernelsReachable): each one costs start-up time and binary size.
//
// # Variants
//
// gen.sh generates the PTX twice with nvcc 11.8:
//
//   - for compute_80, where the FP8 conversions are integer code;
//   - for compute_90, where they are the hardware instructions
//     cvt.rn.satfinite.{e4m3,e5m2}x2.f32 and cvt.rn.f16x2.{e4m3,e5m2}x2.
//
// Load picks the variant by the device's compute capability. LoadVariant
// loads a given one. The compute_80 PTX also runs on 9.0 devices. That is
// how the tests check the software path against the hardware.
//
// # Machine code
//
// gen.sh also compiles each variant's PTX with ptxas, with -fmad=false as
// the PTX: sm_80 for compute_80, and sm_90 for compute_90. A Set loads these
// cubins on a device they run on, 8.x or 9.0, and starts in a fraction of a
// second. Elsewhere the driver JIT-compiles the PTX, and so for the sm80
// variant on a 9.0 GPU. That takes about a minute on a fresh machine, until
// the driver's cache holds the result.
//
// A module named in a file ptxonly would ship without a cubin. That serves
// where the driver's JIT makes faster code than ptxas 11.8. No module here
// does; examples/gpt/kernels ships flash so. DISTOPT_CUDA_PTX=1 forces the
// PTX of every module (cuda.EnvPTX). Set.Images says what each module was
// loaded from.
//
// # Semantics
//
// Every launcher's doc states the computation exactly. The functions of the
// fp8 package are the reference. The GPU tests compare the kernels with them
// bit for bit, over all 2^32 float32 inputs for the conversions. Launchers
// only queue work. Errors of the kernels themselves surface at the next
// synchronization of the stream.
package kernels
