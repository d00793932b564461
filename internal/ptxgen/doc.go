// Package ptxgen fixes where a package of CUDA kernels keeps its generated
// code. The scripts that write that code and the Go code that reads it share
// this layout.
//
// # Generating
//
// The script gen.sh runs from a package's `go generate`. It compiles each
// CUDA source NAME.cu to PTX for each variant, into
// PTXDIR/NAME_VARIANT.ptx. Variant sm80 converts FP8 in software; sm90 uses
// the hardware's conversion. ptxas then compiles each PTX to machine code
// for the architecture it targets, into CUBINDIR/NAME_VARIANT.sm_ARCH.cubin.
//
// The script check.sh regenerates both into a temporary directory. It fails
// if a byte differs, and CI runs it. The scripts nvcc.sh and ptxas.sh hold
// the one command line of each tool. Both pass --fmad=false, so the kernels
// round exactly as the Go reference does.
//
// # Loading
//
// Load reads one module back from a package's embedded files as a
// cuda.Code. cuda.Device.LoadCode loads the cubin that matches the device.
// On other devices, or with DISTOPT_CUDA_PTX=1, it loads the PTX through the
// driver's JIT. With the cubins, a fresh machine starts in seconds instead
// of waiting a minute for the JIT.
//
// Entries and CubinEntries list the kernels a module defines. Tests use them
// to check that every launcher's kernel exists.
//
// LoadLibrary loads the modules of a package in one Variant and looks up
// their kernels by name. internal/kernels uses it. The public
// cuda.Device.LoadLibrary wraps it for packages outside internal/, such as
// examples/gpt/kernels. CheckKernels, CheckCubins and CheckTargets check a
// package's generated code without a GPU; the public
// cuda/cudatest.CheckLibrary runs them.
package ptxgen
