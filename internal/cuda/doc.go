// Package cuda binds the CUDA driver API.
//
// It opens libcuda.so.1 at run time with dlopen. So building needs no CUDA
// toolkit. A binary built anywhere runs on hosts with or without a GPU.
//
// # Finding a GPU
//
// Init loads the driver once per process. On a host without the driver
// library, every call returns an error matching ErrNoDriver. On a host whose
// driver sees no GPU, the error matches ErrNoDevice. Callers fall back on
// those two. Nothing in the package panics or exits for want of a GPU.
//
// # One thread per device
//
// A CUDA context is current per OS thread. Open retains the device's primary
// context, the one that NCCL and the CUDA runtime use. It starts a worker
// goroutine locked to its OS thread, with that context current. Every call
// on the Device and on its streams, events, modules and buffers runs on that
// worker. So callers may use a Device from any goroutine.
//
// Do runs any function on the worker. Other bindings that need the context
// current, such as NCCL, use it. Calls made from inside Do run directly,
// without a round trip. A Lane, from Device.NewLane, is a second such
// thread. It is for work that must make progress while the worker waits,
// such as a communicator's issuer. See docs/DESIGN.md, "Note: device thread
// and hand-overs".
//
// # Memory
//
// Device memory is addressed by DevicePtr. Host memory that takes part in
// asynchronous copies must be pinned memory from Device.AllocHost. Ordinary
// Go memory can be copied with the blocking Stream.Upload and
// Stream.Download. A Device counts what it has handed out in Device.Usage,
// so tests can check for leaks.
//
// # Modules
//
// LoadModule loads PTX or a cubin. The driver JIT-compiles PTX. For
// distopt's kernels that takes about a minute on a fresh machine, and the
// result is then cached. LoadCode takes a Code: a module's PTX and its
// cubins. It loads the cubin that runs on the device, else the PTX.
// DISTOPT_CUDA_PTX=1 forces the PTX. Module.Image says which was loaded.
//
// # Errors
//
// Every CUresult other than CUDA_SUCCESS becomes an *Error. It carries the
// driver function, the numeric code and the driver's name for it, from
// cuGetErrorName. When a module fails to load, the JIT log is attached.
package cuda
