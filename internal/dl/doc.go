// Package dl provides a small wrapper around the dynamic loader (dlopen,
// dlsym, dlclose) so that distopt can open libcuda.so.1 and libnccl.so.2 at
// run time instead of linking against them: a binary built without any CUDA
// toolkit runs everywhere and finds out, at run time, whether a driver is
// there.
//
// Every call that may set dlerror runs with the goroutine locked to its OS
// thread, because dlerror's message is kept per thread. Errors carry that
// message and match ErrOpen, ErrSymbol or ErrClosed under errors.Is.
//
// Without cgo (CGO_ENABLED=0) or on systems other than Linux, Open always
// fails with an error matching ErrUnsupported.
package dl
