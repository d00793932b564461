// Package cuda provides a binding to the CUDA driver API that opens
// libcuda.so.1 at run time with dlopen: building needs no CUDA toolkit, and a
// binary built anywhere runs on hosts with or without a GPU.
//
// # Finding a GPU
//
// Init loads the driver once per process. On a host without the driver
// library every call returns an error matching ErrNoDriver; on a host whose
// driver sees no GPU, one matching ErrNoDevice. Callers fall back on those
// two; nothing in the package panics or exits for want of a GPU.
//
// # One thread per device
//
// A CUDA context is current per OS thread. Open retains the device's primary
// context (the one that NCCL and the CUDA runtime use) and starts a worker
// goroutine locked to its OS thread with that context current; every call on
// the Device and on its streams, events, modules and buffers runs on that
// worker. Callers may therefore use a Device from any goroutine. Do runs an
// arbitrary function there (for other bindings, such as NCCL, that need the
// context current); calls made from inside Do run directly, without a round
// trip. A Lane (Device.NewLane) is a second such thread, for work that must
// make progress while the worker waits (a communicator's issuer).
//
// # Memory
//
// Device memory is addressed by DevicePtr. Host memory that takes part in
// asynchronous copies must be pinned memory from Device.AllocHost; ordinary
// Go memory can be copied with the blocking Stream.Upload and
// Stream.Download. A Device counts what it has handed out (Device.Usage) so
// that tests can check for leaks.
//
// # Modules
//
// LoadModule loads PTX, which the driver JIT-compiles (about a minute for
// distopt's kernels on a fresh machine, then cached), or a cubin. LoadCode
// takes a Code, a module's PTX and its cubins, and loads the cubin that
// runs on the device, else the PTX; DISTOPT_CUDA_PTX=1 forces the PTX.
// Module.Image says which was loaded.
//
// # Errors
//
// Every CUresult other than CUDA_SUCCESS becomes an *Error that carries the
// driver function, the numeric code and the driver's name for it
// (cuGetErrorName); the JIT log is attached when a module fails to load.
package cuda
