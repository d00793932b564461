package gomlxinterop

import "errors"

var (
	// ErrVariable marks a variable the adapter cannot hand over (not
	// float32, no value, or a layout its rank does not allow).
	ErrVariable = errors.New("gomlxinterop: unsupported variable")
	// ErrGraph marks a graph whose trainable variables differ from the
	// parameters the adapter was built with, or a call before Build.
	ErrGraph = errors.New("gomlxinterop: graph does not match the parameters")
	// ErrHandOver marks gradients or batches that do not match the
	// parameters (count, shape, dtype).
	ErrHandOver = errors.New("gomlxinterop: hand-over mismatch")
)
