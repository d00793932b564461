// Package cuinterop bridges distopt's GPU backend and programs built on
// gorgonia.org/cu. It converts device pointers, the CUDA context and streams
// in both directions.
//
// Everything but this comment is behind the build tag gorgonia. The default
// build never imports gorgonia.org/cu. Its package init exits the process on
// a host without a GPU. Its v0.9.6 does not compile against CUDA 13 headers.
// Build with
//
//	go build -tags gorgonia
//
// on a machine with libcuda.so and the cuda.h of CUDA 11.x or 12.x.
// gorgonia.org/cu links the driver at build time; distopt itself opens it at
// run time.
//
// # Memory
//
// FromDevicePtr wraps memory allocated through gorgonia, with cu.MemAlloc,
// as a buffer.DeviceBuffer. Such a buffer goes to distopt's backend and
// communicators.
// DevicePtr, GradPtr, ParamPtr and ScaleInvPtr give distopt's buffers and
// the optimizer's views back as cu.DevicePtr. A host buffer, such as the CPU
// backend's, gives ErrHostMemory.
//
// Memory stays owned by whoever allocated it. So distopt never frees a
// wrapped gorgonia pointer, and gorgonia must not free a view's pointer.
//
// # Context
//
// Each GPU runs distopt's work in its primary context, the one the CUDA
// runtime and NCCL use. That context is current on a dedicated OS thread.
// Device memory belongs to the context it was allocated in. By default,
// gorgonia's engine makes a context of its own, with cu.NewContext or
// cu.Device.MakeContext. Memory of such a context cannot go to distopt's
// kernels, nor distopt's memory to kernels launched in it. So the gorgonia
// program must work in the primary context of distopt's device too. There
// are three ways, the simplest first:
//
//   - Do(b, fn) runs fn on the backend's own device thread, where the
//     primary context is current. Every package-level call of
//     gorgonia.org/cu inside fn acts in it: cu.MemAlloc, cu.MemcpyHtoD,
//     cu.LaunchKernel and the rest. The thread also does distopt's work, so
//     keep fn short.
//   - OpenContext(dev) retains the primary context of dev and makes it
//     current on a new locked thread of its own. Context.Do runs functions
//     there, concurrently with distopt.
//   - PrimaryContext(b) returns the context as a cu.CUContext, for a program
//     that manages its own threads. On each thread that calls gorgonia, call
//     runtime.LockOSThread, then cu.SetCurrentContext(PrimaryContext(b)).
//     Keep the backend open meanwhile: it holds the retain.
//
// Never wrap the primary context in a *cu.Ctx, as cu.CtxFromCUContext does.
// That type's Close, which its finalizer also runs, calls cuCtxDestroy on the
// context distopt is using. Memory in another context can be copied in with
// cu.MemcpyPeer.
//
// # Streams and ordering
//
// The optimizer's backend queues all its work on one stream,
// gpu.Backend.Stream. Optimizer.Step reads the gradient views on it, and
// synchronizes it before it returns. So when Step returns, the parameter
// views are final and may be read from any stream.
//
// The other direction is the program's job. The gradients that gorgonia
// writes must be complete before Step reads them. There are two ways:
//
//   - Synchronize gorgonia's stream, with cu.Stream.Synchronize, before
//     calling Step.
//   - Order the backend's stream with an event: BackendWait(b, s) makes it
//     wait for the work queued on s so far, without blocking the host. This
//     is enough only when the communicator's gradient reduce-scatter also
//     runs after the backend's stream. collective/single does, and so does
//     collective/nccl when its Config.Compute is the backend's stream.
//     Otherwise synchronize.
//
// WaitBackend is the reverse. After WaitBackend(s, b), work queued on s waits
// for everything queued on the backend so far. An example is a Zero of the
// gradients before a fused backward pass writes them.
//
// FromStream and ToStream convert streams to and from the raw CUstream handle
// that distopt uses; FromEvent and ToEvent do the same for events. So
// gorgonia can also queue its work on the backend's stream:
//
//	s := cuinterop.ToStream(b.Stream().Handle())
//
// Such a converted stream or event stays owned by its creator: do not
// Destroy it.
//
// # Devices
//
// In distopt, a GPU is named by its ordinal. gorgonia's cu.Device holds the
// driver's CUdevice, which the driver defines as the ordinal. So
// cu.GetDevice(i) is cu.Device(i), and the conversions here rely on that.
package cuinterop
