// Package kernels provides the GPU kernels of the GPT example, and typed Go
// launchers that queue them on a cuda.Stream. The kernels are CUDA C sources
// in this directory. Their PTX, in ptx/, and their machine code, in cubin/,
// are generated, committed and embedded. The package uses only the module's
// public packages, so it builds wherever the example is copied.
//
// # Layout
//
//   - gpt.cu: the decoder's elementwise operations and the any-width row
//     kernels;
//   - gptrows.cu: the row kernels that keep a row in registers, LayerNorm
//     and cross-entropy;
//   - gptcols.cu: the column reductions, the gradients of the biases, the
//     LayerNorms and the embedding;
//   - gpthead.cu: the products of the tied output head in float32
//     (gpumodel.HeadFP32) and its roundings to bfloat16 (HeadBF16, whose
//     products run on cuBLASLt);
//   - gptfused.cu: LayerNorm and GELU writing the next linear layer's FP8
//     input directly, with the codes and scales package gemm would make
//     of their float32 outputs; gptnorm.cuh holds the LayerNorm pieces it
//     shares with gpt.cu and gptrows.cu, so that the bits are the same;
//   - gptbwd.cu: the backward producers of the linear layers' output
//     gradients (LayerNorm's input gradient, GELU's gradient) folding
//     their amax for gemm, and the bfloat16-gradient forms of the
//     LayerNorm and bias gradients; gptbwd.cuh holds the device code they
//     share with gpt.cu, gptrows.cu and gptcols.cu;
//   - attention.cu: the softmax and head layouts of attention computed with
//     GEMMs;
//   - flash.cu: fused attention, the variants the model launches; its
//     device code is in flash.cuh;
//   - flashalt.cu: the other variants of fused attention, which the tests
//     and benchmarks compare.
//
// flash ships as PTX only (file ptxonly): the driver's JIT makes faster
// code of it than ptxas 11.8. Every other module, flashalt included, ships
// as machine code, so a fresh machine compiles only flash.
//
// The launchers are in gpt.go, gptlaunch.go, gptfused.go, gptbwd.go,
// attention.go and flash.go.
// The file scratch.go holds the partial sums of the two-pass kernels. Each .cu file
// becomes one module per cuda.Variant, loaded with cuda.Device.LoadLibrary.
//
// To add kernels:
//
//  1. Write them, extern "C" __global__, in a .cu file.
//  2. Run `go generate ./examples/gpt/kernels`. gen.sh runs nvcc and ptxas
//     11.8, with the shared headers of internal/kernels (bf16.cuh and
//     common.cuh; gptfused.cu also fp8.cuh and segments.cuh, the FP8
//     encode and scale rule of gemm's quantization).
//  3. Add launchers that call Set.function with the kernel's name.
//
// TestLibrary checks that the modules define exactly the kernels the
// launchers request.
//
// # Machine code
//
// A Set loads the cubins on the devices they run on: sm_80 for 8.x, sm_90
// for 9.0. Elsewhere the driver's JIT compiles the PTX. The module flash,
// named in the file ptxonly, ships as PTX alone: the driver's JIT made faster
// code for it than ptxas 11.8. DISTOPT_CUDA_PTX=1 forces the PTX of every module
// (cuda.EnvPTX).
//
// # Semantics
//
// Every launcher's doc states its computation. It names its float64
// reference in examples/gpt/model, and the GPU tests compare the kernels
// with it. Every reduction runs in a fixed order, so results repeat bit for
// bit. Launchers only queue work. Errors of the kernels themselves surface
// at the next synchronization of the stream.
package kernels
