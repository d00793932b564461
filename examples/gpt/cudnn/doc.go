// Package cudnn runs causal scaled-dot-product attention with NVIDIA's
// fused flash attention in cuDNN 9, for the GPT example.
//
// It exists because cuDNN's kernels beat the hand-written ones of
// examples/gpt/kernels/flash.cu. On one H200 at the 1.3B shape (batch 4,
// 16 heads, seq 2048, head width 128) cuDNN 9.19 took 0.151 ms forward and
// 0.521 ms backward, the fused kernels 0.344 ms and about 1.0 ms.
//
// # Loading
//
// The library is opened at run time with dlopen, like cuBLASLt. Default
// tries the path in CUDNN_LIBRARY first. Else it tries libcudnn.so.9 by
// name, then the usual install places and Python wheels (LibraryNames,
// LibraryGlobs). Building needs no cuDNN and no CUDA toolkit: the few C
// types and enum values used are declared here (enums.go), as NVIDIA's
// backend API reference gives them. Without cuDNN, Default returns an
// error matching ErrNoLibrary that names every path tried; nothing
// panics. The runtime-compiled engines also need NVRTC on the loader's
// path (the nvidia-cuda-nvrtc wheel, or the CUDA toolkit).
//
// # Graphs
//
// The attention is an operation graph of cuDNN's backend API, written
// first as Go data (graph.go, sdpa.go): tensors with dims, strides, types
// and virtual flags, and matmul, pointwise, reduction and reshape
// operations. The forward graph also writes the log-sum-exp of every row,
// which the backward graph reads. The graphs follow the pattern cuDNN's
// fused attention engine recognises, as cudnn-frontend builds it for
// cuDNN 9 before 9.21 (the causal mask as GEN_INDEX, CMP_GE and
// BINARY_SELECT). emit.go hands them to cuDNN through generic calls; the
// tests run the same graphs on the CPU against a float64 reference.
//
// New builds both plans for one Config (shape, layout, scale) and
// allocates a workspace of a fixed bound (WorkspaceBytes). Every call runs
// on the device's worker thread (cuda.Device.Do), on the caller's stream.
//
// # Repeatable bits
//
// The backward graph has two forms. In the first, dq is accumulated in
// float32 across the key blocks: with cuDNN 9.14 on Hopper its bits
// differed between runs in a few elements, even on engines without the
// nondeterministic note. In the second (Config.Repeatable), dq is written
// by its product alone, so the engine keeps the score gradient of every
// head in the workspace (2 bytes per score) and reduces dq in a fixed
// order: the form cudnn-frontend builds when deterministic attention is
// asked for. TestRepeatableGPU checks both.
//
// # Layouts
//
// Layout gives every tensor's strides. RowLayout is the GPT's: q, k and v
// are read in place from the model's bfloat16 qkv activation, and the
// gradients written in the same interleaved form. No head is copied.
//
// # Errors
//
// A graph cuDNN refuses gives an error matching ErrNotSupported, with
// cuDNN's own message (cudnnGetLastErrorString) for each engine tried.
// Run with CUDNN_LOGLEVEL_DBG=2 and CUDNN_LOGDEST_DBG=stderr for cuDNN's
// full reasons.
package cudnn
