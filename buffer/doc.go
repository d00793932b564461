// Package buffer provides the vocabulary that the packages of distopt share
// to name memory: element types (DType), where bytes live (MemoryKind), and
// the Buffer interface with its host and device implementations.
//
// It sits below every other package. Collectives move Buffers, the optimizer
// allocates them, and the GEMM engine reads FP8 weights from DeviceBuffers.
// A DeviceBuffer is a plain address and size, so any CUDA binding can make one.
package buffer
