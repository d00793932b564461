package gpu

import (
	"errors"

	"github.com/distopt/distopt/internal/cuda"
)

var (
	// ErrUnavailable is returned by New and Choose("gpu") when no usable
	// GPU is found; the error also matches ErrNoDriver or ErrNoDevice.
	ErrUnavailable = errors.New("gpu: no usable GPU")
	// ErrNoDriver matches errors caused by a missing CUDA driver
	// (libcuda.so.1).
	ErrNoDriver = cuda.ErrNoDriver
	// ErrNoDevice matches errors caused by the driver seeing no GPU (or
	// none of the ordinal asked for).
	ErrNoDevice = cuda.ErrNoDevice
	// ErrBackend is returned by Choose for a request other than "cpu",
	// "gpu" or "auto".
	ErrBackend = errors.New("gpu: unknown backend")
)
