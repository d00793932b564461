//go:build !cgo || !linux

package main

import "errors"

// runGPU needs cgo on Linux (the CUDA driver and the PJRT plugin).
func runGPU(gpuOptions) error { return errors.New("-backend gpu needs a build with cgo on Linux") }
