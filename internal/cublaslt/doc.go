// Package cublaslt binds the few functions of NVIDIA's cuBLASLt that the
// FP8 GEMMs of distopt need: a handle, matmul descriptors with FP8 scale
// pointers and scale modes, matrix layouts, heuristic algorithm selection
// with a workspace limit, and the matmul itself.
//
// # Loading
//
// The library is opened at run time with dlopen, like the CUDA driver and
// NCCL: Default tries the path in CUBLASLT_LIBRARY, or else
// libcublasLt.so.13, libcublasLt.so.12 and the same in /usr/local/cuda/lib64
// (LibraryNames). Building needs no CUDA toolkit; a binary built
// here runs on a host without cuBLASLt and gets an error matching
// ErrNoLibrary (naming every name it tried), never a panic.
//
// # Conventions
//
// cuBLASLt is column-major: a matrix layout of Rows x Cols with leading
// dimension LD. Row-major callers describe a row-major R x C matrix as a
// column-major C x R one (see package gemm). Every call that touches the
// GPU runs on the device's worker thread (cuda.Device.Do) with its primary
// context current. C status codes stay inside this package: failures come
// back as *Error, matching ErrNotSupported or ErrInvalid where the status
// says so.
package cublaslt
