// Package cublaslt binds the few functions of NVIDIA's cuBLASLt that the FP8
// GEMMs of distopt need.
//
// Those are a handle, matmul descriptors with FP8 scale pointers and scale
// modes, and matrix layouts. They also include heuristic algorithm
// selection with a workspace limit, and the matmul itself.
//
// # Loading
//
// The library is opened at run time with dlopen, like the CUDA driver and
// NCCL. Default tries the path in CUBLASLT_LIBRARY first. Else it tries
// libcublasLt.so.13 and libcublasLt.so.12, then the same names in
// /usr/local/cuda/lib64; see LibraryNames.
//
// Building needs no CUDA toolkit. A binary built here also runs on a host
// without cuBLASLt. There it gets an error matching ErrNoLibrary, never a
// panic. The error names every library it tried.
//
// # Conventions
//
// cuBLASLt is column-major. A matrix layout is Rows × Cols with leading
// dimension LD. A row-major R × C matrix is described as a column-major
// C × R one; see package gemm.
//
// Every call that touches the GPU runs on the device's worker thread, in
// cuda.Device.Do, with its primary context current.
//
// C status codes stay inside this package. Failures come back as *Error. It
// matches ErrNotSupported or ErrInvalid where the status says so.
package cublaslt
