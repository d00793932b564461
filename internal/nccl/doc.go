// Package nccl provides a binding to NCCL, the NVIDIA collective
// communication library, that opens libnccl.so.2 at run time with dlopen:
// building needs neither NCCL nor the CUDA toolkit, and a binary built
// anywhere runs on hosts with or without NCCL.
//
// # Loading
//
// Default opens the library named by the environment variable NCCL_LIBRARY
// (a path), or libnccl.so.2 searched the way the dynamic loader searches,
// once per process. Open opens a given path. Both read ncclGetVersion and
// refuse a library older than MinVersion with an error matching ErrTooOld; a
// library that is missing or lacks an entry point gives an error matching
// ErrNoLibrary. Nothing in the package panics or exits for want of NCCL.
//
// # Threads and contexts
//
// NCCL finds its GPU through the CUDA context current on the calling thread.
// Every call that takes or creates a communicator must therefore run on a
// thread where the device's primary context is current: in distopt, inside
// cuda.Device.Do. Streams and device addresses cross as the raw handles of
// package cuda (cuda.Stream.Handle, cuda.DevicePtr).
//
// # Errors
//
// Every ncclResult_t other than ncclSuccess becomes an *Error that keeps the
// function, the code, the enum name (such as "ncclRemoteError"), NCCL's text
// for it (ncclGetErrorString) and, where NCCL has one, the message of the
// last failure (ncclGetLastError). Error.Is maps the codes onto the
// sentinels ErrInProgress, ErrRemote, ErrInvalid and ErrCUDA.
//
// # Non-blocking communicators
//
// A communicator created with Config.Blocking false never blocks the calling
// thread: initialization and group ends may return an error matching
// ErrInProgress, after which the caller polls Comm.AsyncError until it stops
// matching ErrInProgress, before any other call on that communicator. Such a
// communicator can always be aborted (Comm.Abort), even while a peer has
// vanished.
package nccl
