// Package nccl binds NCCL, the NVIDIA collective communication library.
//
// It opens libnccl.so.2 at run time with dlopen. So building needs neither
// NCCL nor the CUDA toolkit. A binary built anywhere runs on hosts with or
// without NCCL.
//
// # Loading
//
// Default opens the library once per process. It takes the path in the
// environment variable NCCL_LIBRARY if set. Else it searches for
// libnccl.so.2 the way the dynamic loader does. Open opens a given path.
//
// Both read ncclGetVersion. They refuse a library older than MinVersion with
// an error matching ErrTooOld. A library that is missing or lacks an entry
// point gives an error matching ErrNoLibrary. Nothing in the package panics
// or exits for want of NCCL.
//
// # Threads and contexts
//
// NCCL finds its GPU through the CUDA context current on the calling
// thread. So every call that takes or creates a communicator must run on a
// thread where the device's primary context is current. In distopt, that is
// inside cuda.Device.Do. Streams and device addresses cross as the raw
// handles of package cuda: cuda.Stream.Handle and cuda.DevicePtr.
//
// # Errors
//
// Every ncclResult_t other than ncclSuccess becomes an *Error. It keeps the
// function, the code and the enum name, such as "ncclRemoteError". It keeps
// NCCL's text for the code, from ncclGetErrorString. Where NCCL has one, it
// keeps the message of the last failure too, from ncclGetLastError.
// Error.Is maps the codes onto the sentinels ErrInProgress, ErrRemote,
// ErrInvalid and ErrCUDA.
//
// # Non-blocking communicators
//
// A communicator created with Config.Blocking false never blocks the calling
// thread. Its initialization and group ends may return an error matching
// ErrInProgress. The caller then polls Comm.AsyncError until it stops
// matching ErrInProgress. Only then may it make another call on that
// communicator. Such a communicator can always be aborted with Comm.Abort,
// even while a peer has vanished.
package nccl
