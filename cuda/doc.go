// Package cuda provides the GPU surface of distopt: devices, streams, device
// memory, pinned host memory, modules of PTX, kernel launches and events.
//
// It is a small wrapper of the module's own CUDA driver binding. That binding
// opens libcuda.so.1 at run time, so building needs no CUDA toolkit. On a
// host without the driver, Open returns an error matching ErrNoDriver. On a
// host without a GPU, the error matches ErrNoDevice. Nothing panics or exits
// for want of a GPU.
//
// A Device runs every call on one goroutine, locked to an OS thread, with
// the device's primary context current. So a Device may be used from any
// goroutine. The gemm engine, the optimizer's GPU backend and models written
// outside this module take the handles of this package.
//
// A Library is a package's own kernels: the PTX and cubins it embeds, in two
// variants. Device.LoadLibrary loads one. The GPT example's kernels, in
// examples/gpt/kernels, are one such Library. Package cuda/cudatest holds
// what GPU tests share.
package cuda
