// Command distopt-bench-gemm measures the FP8 GEMMs of package gemm on one
// GPU: the three products of the linear layers of a GPT (hidden 2048, FFN
// 8192, 16384 tokens by default: QKV 2048->6144, proj 2048->2048, fc1
// 2048->8192, fc2 8192->2048) and a square 8192^3 product, for per-tensor
// scales and for 128x128 weight tiles with 1x128 activation blocks.
//
// Each product is timed with CUDA events over -iters runs after -warmup
// (the plan's heuristic and the scratch allocation happen in the warm-up);
// TFLOP/s counts 2*M*N*K. The data gradient includes the exact transient
// transpose of the weight; "wgrad" reads activations already stored
// transposed, "wgrad+T" transposes row-major per-tensor activations inside
// (their cost counted).
//
// The memory check builds -layers layers of the four weight matrices (the
// model, in FP8), runs the forward and backward products of every layer,
// and reports device memory (cuMemGetInfo) before and after next to the
// engine's peak scratch and the planner's prediction (gemm.Scratch): the
// growth must be one product's scratch, not proportional to the model.
//
// Usage:
//
//	distopt-bench-gemm [-tokens 16384] [-hidden 2048] [-ffn 8192] [-square 8192] [-iters 20] [-warmup 3] [-layers 24] [-autotune 0]
//
// With -autotune n each plan times n of cuBLASLt's heuristic candidates on
// its first overwriting call and keeps the fastest (the weight gradient's
// first warm-up call overwrites; the timed ones accumulate).
//
// scripts/bench/torch_scaled_mm.py measures torch._scaled_mm on the same
// shapes, for comparison in the same device call.
package main
