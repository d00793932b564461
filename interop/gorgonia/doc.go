// Package cuinterop provides the bridge between distopt's GPU backend and
// programs built on gorgonia.org/cu: device pointers, the CUDA context and
// streams in both directions.
//
// Everything but this comment is behind the build tag gorgonia. The default
// build never imports gorgonia.org/cu, whose package init calls os.Exit(1)
// on a host without a GPU and whose v0.9.6 does not compile against CUDA 13
// headers; build with
//
//	go build -tags gorgonia
//
// on a machine with CUDA 11.x or 12.x headers (cuda.h) and libcuda.so
// (gorgonia.org/cu links the driver at build time; distopt itself opens it
// at run time).
//
// # Memory
//
// FromDevicePtr wraps memory allocated through gorgonia (cu.MemAlloc) as a
// buffer.DeviceBuffer that distopt's backend and communicators accept.
// DevicePtr, GradPtr, ParamPtr and ScaleInvPtr give distopt's buffers and
// the optimizer's views (optimizer.GradView, optimizer.ParamView) back as
// cu.DevicePtr; a host buffer (the CPU backend's) is ErrHostMemory. The
// memory stays owned by whoever allocated it: distopt never frees a wrapped
// gorgonia pointer, and gorgonia must not free a view's pointer.
//
// # Context
//
// distopt drives each GPU through its primary context (the one the CUDA
// runtime and NCCL use), current on a dedicated OS thread. Device memory
// belongs to the context it was allocated in: memory from a context of
// gorgonia's own (cu.NewContext, cu.Device.MakeContext, which is what
// gorgonia's engine creates by default) cannot be passed to distopt's
// kernels, and distopt's memory cannot be passed to kernels launched in
// such a context. The gorgonia program must therefore work in the primary
// context of distopt's device too. Three ways, from the simplest:
//
//   - Do(b, fn) runs fn on the backend's own device thread, where the
//     primary context is current: every package-level call of gorgonia.org/cu
//     inside fn (cu.MemAlloc, cu.MemcpyHtoD, cu.LaunchKernel, ...) acts in it.
//     The thread is shared with distopt's work: keep fn short.
//   - OpenContext(dev) retains the primary context of dev and makes it
//     current on a new locked thread of its own; Context.Do runs functions
//     there, concurrently with distopt.
//   - PrimaryContext(b) returns the context as a cu.CUContext for a program
//     that manages its threads itself: runtime.LockOSThread, then
//     cu.SetCurrentContext(PrimaryContext(b)) on each thread that calls
//     gorgonia (keep the backend open meanwhile: it holds the retain).
//
// Never wrap the primary context in a *cu.Ctx (cu.CtxFromCUContext): that
// type's Close, also run by its finalizer, calls cuCtxDestroy on the context
// distopt is using. Memory that already lives in another context can be
// copied in with cu.MemcpyPeer.
//
// # Streams and ordering
//
// The optimizer's backend queues all its work on one stream
// (gpu.Backend.Stream); Optimizer.Step reads the gradient views on it and
// returns after synchronizing it, so the parameter views are final, and may
// be read from any stream, when Step returns. The other direction is the
// program's job: the gradients that gorgonia writes must be complete before
// Step reads them. Either synchronize gorgonia's stream (cu.Stream
// .Synchronize) before calling Step, or order it with an event:
// BackendWait(b, s) makes the backend's stream wait for the work queued on
// s so far, without blocking the host. The event is enough only when the
// communicator's gradient reduce-scatter also runs after the backend's
// stream: collective/single does, and collective/nccl does when its
// Config.Compute is the backend's stream; otherwise synchronize. WaitBackend(s, b) is the reverse:
// work queued on s afterwards waits for everything queued on the backend so
// far (for example a Zero of the gradients before a fused backward pass
// writes them). FromStream and ToStream convert streams to and from the raw
// CUstream handle that distopt uses (FromEvent and ToEvent likewise for
// events), so gorgonia can also queue its work directly on the backend's
// stream: ToStream(b.Stream().Handle()). Such a converted stream or event
// stays owned by its creator: do not Destroy it.
//
// # Devices
//
// distopt names a GPU by its ordinal. gorgonia's cu.Device holds the
// driver's CUdevice, which the driver defines as the ordinal
// (cu.GetDevice(i) is cu.Device(i)); the conversions here rely on that.
package cuinterop
