// Package ptxgen is the layout of the generated code of a package of CUDA
// kernels, shared by the scripts that write it and the code that reads it.
//
// gen.sh, run by a package's `go generate`, compiles each CUDA source
// NAME.cu to PTX for each variant (sm80: FP8 conversions in software; sm90:
// the hardware's) into PTXDIR/NAME_VARIANT.ptx, and each PTX with ptxas to
// machine code for the architecture it targets into
// CUBINDIR/NAME_VARIANT.sm_ARCH.cubin. check.sh regenerates both into a
// temporary directory and fails if a byte differs; CI runs it. nvcc.sh and
// ptxas.sh hold the one command line of each tool, with --fmad=false so that
// the kernels round exactly as the Go reference.
//
// Load reads one module back from a package's embedded files as a
// cuda.Code, which cuda.Device.LoadCode loads from the cubin matching the
// device, or from the PTX through the driver's JIT on other devices (and
// with DISTOPT_CUDA_PTX=1). A fresh machine then starts in seconds instead
// of waiting a minute for the JIT. LoadLibrary loads every module of a
// package in one Variant and looks its kernels up by name: internal/kernels
// uses it, and the public cuda.Device.LoadLibrary wraps it for packages
// outside internal/ such as examples/gpt/kernels. Entries and CubinEntries
// list the kernels each defines; CheckKernels, CheckCubins and
// CheckTargets check a package's generated code without a GPU (the public
// cuda/cudatest.CheckLibrary runs them).
package ptxgen
