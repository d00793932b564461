// Command distopt-bench-gemm measures the FP8 GEMMs of package gemm on one
// GPU.
//
// Usage:
//
//	distopt-bench-gemm [-tokens 16384] [-hidden 2048] [-ffn 8192] [-square 8192] [-iters 20] [-warmup 3] [-layers 24] [-autotune 0]
//
// # Products
//
// It times the products of the four linear layers of a GPT, and a square
// 8192³ product. The GPT's defaults are hidden 2048, FFN 8192 and 16384
// tokens. The layers are then QKV 2048→6144, proj 2048→2048, fc1 2048→8192
// and fc2 8192→2048. Each layer has a forward product, a data gradient and
// a weight gradient.
//
// Each product runs with per-tensor scales, and with 128x128 weight tiles
// and 1x128 activation blocks. It is timed with CUDA events over -iters runs
// after -warmup runs. The plan's heuristic and the scratch allocation
// happen in the warm-up. TFLOP/s counts 2*M*N*K.
//
// The data gradient includes the exact transient transpose of the weight.
// "wgrad" reads activations already stored transposed. "wgrad+T" transposes
// row-major per-tensor activations inside, and its time counts that.
//
// With -autotune n, each plan times n of cuBLASLt's heuristic candidates on
// its first overwriting call, and keeps the fastest. The weight gradient's
// first warm-up call overwrites; the timed ones accumulate.
//
// # Memory
//
// The memory check builds -layers layers of the four weight matrices: the
// model, in FP8. It runs the forward and backward products of every layer.
// It reports device memory before and after, from cuMemGetInfo. Next to it,
// it reports the engine's peak scratch and the planner's prediction,
// gemm.Scratch. The growth must be one product's scratch, not proportional
// to the model.
//
// scripts/bench/torch_scaled_mm.py measures torch._scaled_mm on the same
// shapes, for comparison in the same device call.
package main
