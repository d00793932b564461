// Package buffer names the memory that distopt's packages share.
//
// It defines the element types (DType), where bytes live (MemoryKind), and
// the Buffer interface with its host and device implementations.
//
// It sits below every other package. Collectives move Buffers and the
// optimizer allocates them. The GEMM engine reads FP8 weights from
// DeviceBuffers. A DeviceBuffer is a plain address and size, so any CUDA
// binding can make one.
package buffer
