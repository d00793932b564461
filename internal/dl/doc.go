// Package dl wraps the dynamic loader: dlopen, dlsym and dlclose.
//
// distopt opens libcuda.so.1 and libnccl.so.2 at run time instead of linking
// against them. So a binary built without a CUDA toolkit runs everywhere. It
// finds out at run time whether a driver is there.
//
// dlerror keeps its message per OS thread. So every call that may set it
// runs with the goroutine locked to its thread. Errors carry that message.
// They match ErrOpen, ErrSymbol or ErrClosed under errors.Is.
//
// Without cgo (CGO_ENABLED=0), or on systems other than Linux, Open always
// fails. Its error then matches ErrUnsupported.
package dl
