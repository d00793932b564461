//go:build !cgo || !linux

package dl

import "unsafe"

// Library is a shared library opened with Open. In this build no library
// can be opened.
type Library struct{ name string }

// Open always fails with an error matching ErrUnsupported in a build without
// cgo or on an operating system other than Linux.
func Open(name string, flags Flag) (*Library, error) {
	return nil, &Error{Op: "open", Name: name, Kind: ErrUnsupported}
}

// Name returns the name or path the library was opened with.
func (l *Library) Name() string { return l.name }

// Lookup always fails with an error matching ErrClosed.
func (l *Library) Lookup(symbol string) (unsafe.Pointer, error) {
	return nil, &Error{Op: "lookup", Name: symbol, Kind: ErrClosed}
}

// Close always fails with an error matching ErrClosed.
func (l *Library) Close() error {
	return &Error{Op: "close", Name: l.name, Kind: ErrClosed}
}
