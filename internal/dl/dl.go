//go:build cgo && linux

package dl

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
*/
import "C"

import (
	"runtime"
	"sync"
	"unsafe"
)

// Library is a shared library opened with Open. Its methods are safe for
// concurrent use.
type Library struct {
	name string

	mu     sync.RWMutex
	handle unsafe.Pointer // nil once closed
}

// Open loads the shared library name with the mode bits flags (Now|Local
// when flags is 0). A name without a slash is searched for the way the
// dynamic loader searches (LD_LIBRARY_PATH, the ld.so cache, /lib,
// /usr/lib); a name with a slash is a path. Opening a library that is
// already loaded returns a new reference to it, released by Close.
//
// A library that cannot be loaded gives an *Error matching ErrOpen, whose
// Message is dlerror's text.
func Open(name string, flags Flag) (*Library, error) {
	if flags == 0 {
		flags = Now | Local
	}
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	h := C.dlopen(cname, C.int(flags))
	if h == nil {
		return nil, &Error{Op: "open", Name: name, Message: lastError(), Kind: ErrOpen}
	}
	return &Library{name: name, handle: h}, nil
}

// Name returns the name or path the library was opened with.
func (l *Library) Name() string { return l.name }

// Lookup returns the address of symbol in the library. A symbol the library
// does not define gives an *Error matching ErrSymbol; a closed library one
// matching ErrClosed. A symbol whose address is NULL (possible for
// variables, never for functions) is reported as missing.
func (l *Library) Lookup(symbol string) (unsafe.Pointer, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.handle == nil {
		return nil, &Error{Op: "lookup", Name: symbol, Kind: ErrClosed}
	}
	csym := C.CString(symbol)
	defer C.free(unsafe.Pointer(csym))

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	C.dlerror() // clear any earlier message of this thread
	p := C.dlsym(l.handle, csym)
	if p == nil {
		msg := lastError()
		return nil, &Error{Op: "lookup", Name: symbol, Message: msg, Kind: ErrSymbol}
	}
	return p, nil
}

// Close releases this reference to the library; the loader unmaps it when
// its last reference goes (unless it was opened with NoDelete). Addresses
// returned by Lookup must not be used afterwards. A second Close returns an
// error matching ErrClosed.
func (l *Library) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.handle == nil {
		return &Error{Op: "close", Name: l.name, Kind: ErrClosed}
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if C.dlclose(l.handle) != 0 {
		return &Error{Op: "close", Name: l.name, Message: lastError(), Kind: ErrClose}
	}
	l.handle = nil
	return nil
}

// lastError returns and clears dlerror's message for the calling thread.
// The caller must hold its OS thread.
func lastError() string {
	msg := C.dlerror()
	if msg == nil {
		return ""
	}
	return C.GoString(msg)
}
