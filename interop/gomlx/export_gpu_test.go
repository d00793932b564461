//go:build cgo && linux

package gomlxinterop

// XLADevice exposes xlaDevice to the tests.
var XLADevice = xlaDevice
