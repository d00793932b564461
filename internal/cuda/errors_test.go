package cuda_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/distopt/distopt/internal/cuda"
)

func TestErrorText(t *testing.T) {
	tests := []struct {
		name string
		err  *cuda.Error
		want string
	}{
		{"named", &cuda.Error{Op: "cuMemAlloc", Code: 2, Name: "CUDA_ERROR_OUT_OF_MEMORY"}, "cuda: cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (2)"},
		{"unnamed", &cuda.Error{Op: "cuInit", Code: 999}, "cuda: cuInit: CUDA error (999)"},
		{"detail", &cuda.Error{Op: "cuModuleLoadDataEx", Code: 218, Name: "CUDA_ERROR_INVALID_PTX", Detail: "ptxas fatal"}, "cuda: cuModuleLoadDataEx: CUDA_ERROR_INVALID_PTX (218): ptxas fatal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("Error() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestErrorIs(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		target error
		want   bool
	}{
		{"no device", &cuda.Error{Code: cuda.ErrorNoDevice}, cuda.ErrNoDevice, true},
		{"wrapped no device", fmt.Errorf("open: %w", &cuda.Error{Code: cuda.ErrorNoDevice}), cuda.ErrNoDevice, true},
		{"oom", &cuda.Error{Code: cuda.ErrorOutOfMemory}, cuda.ErrOutOfMemory, true},
		{"oom is not no device", &cuda.Error{Code: cuda.ErrorOutOfMemory}, cuda.ErrNoDevice, false},
		{"invalid value is not oom", &cuda.Error{Code: cuda.ErrorInvalidVal}, cuda.ErrOutOfMemory, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := errors.Is(tt.err, tt.target); got != tt.want {
				t.Errorf("errors.Is(%v, %v) = %v, want %v", tt.err, tt.target, got, tt.want)
			}
		})
	}
}

// TestNoGPU checks the behaviour on a host without a usable GPU: every entry
// point returns an error of the two classes callers fall back on, and none
// panics. On a GPU host it checks that Init succeeds.
func TestNoGPU(t *testing.T) {
	err := cuda.Init()
	if err == nil {
		if _, err := cuda.DriverVersion(); err != nil {
			t.Errorf("DriverVersion after a successful Init: %v", err)
		}
		return
	}
	if !errors.Is(err, cuda.ErrNoDriver) && !errors.Is(err, cuda.ErrNoDevice) {
		t.Fatalf("Init() = %v, want ErrNoDriver or ErrNoDevice", err)
	}
	if n, err2 := cuda.DeviceCount(); n != 0 || !errors.Is(err2, err) && err2.Error() != err.Error() {
		t.Errorf("DeviceCount() = %d, %v; want 0, %v", n, err2, err)
	}
	if d, err2 := cuda.Open(0); d != nil || err2 == nil {
		t.Errorf("Open(0) = %v, %v; want an error", d, err2)
	}
	if _, err2 := cuda.Devices(); err2 == nil {
		t.Error("Devices() succeeded without a GPU")
	}
	if _, err2 := cuda.DriverVersion(); err2 == nil {
		t.Error("DriverVersion() succeeded without a driver")
	}
}
