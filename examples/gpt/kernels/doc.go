// Package kernels provides the GPU kernels of the GPT example: CUDA C
// sources in this directory, the PTX generated from them (ptx/) and its
// machine code (cubin/), both committed and embedded, and typed Go
// launchers that queue them on a cuda.Stream. It uses only the module's
// public packages, so it builds wherever the example is copied.
//
// # Layout
//
// gpt.cu holds the elementwise operations of the decoder and the
// any-width row kernels; gptrows.cu the row kernels that keep a row in
// registers (LayerNorm, cross-entropy); gptcols.cu the column reductions
// (bias and LayerNorm gradients, the embedding's gradient); gpthead.cu the
// tied output head's products; attention.cu the softmax and head layouts
// of attention computed with GEMMs; flash.cu fused attention. Launchers:
// gpt.go and gptlaunch.go, attention.go, flash.go; scratch.go holds the
// two-pass kernels' partial sums. Each .cu file becomes one module per
// cuda.Variant, loaded through cuda.Device.LoadLibrary. To add kernels:
// write them (extern "C" __global__) in a .cu file, run `go generate
// ./examples/gpt/kernels` (gen.sh: nvcc and ptxas 11.8, the shared headers
// bf16.cuh and common.cuh from internal/kernels), and add launchers that
// call Set.function with the kernel's name; TestLibrary checks that the
// modules define exactly the kernels the launchers request.
//
// # Machine code
//
// A Set loads the cubins on the devices they run on (sm_80 for 8.x, sm_90
// for 9.0) and the PTX through the driver's JIT elsewhere. flash (the
// file ptxonly) ships as PTX alone: the driver's JIT made faster code for
// it than ptxas 11.8. DISTOPT_CUDA_PTX=1 forces the PTX of every module
// (cuda.EnvPTX).
//
// # Semantics
//
// Every launcher's doc states its computation and names its float64
// reference in examples/gpt/model, whose GPU tests compare the kernels
// with it; every reduction runs in a fixed order, so results repeat bit
// for bit. Launchers only queue work: errors of the kernels themselves
// surface at the next synchronization of the stream.
package kernels
