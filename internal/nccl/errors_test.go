package nccl

import (
	"errors"
	"strings"
	"testing"
)

func TestResultNames(t *testing.T) {
	want := []string{"ncclSuccess", "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError",
		"ncclInvalidArgument", "ncclInvalidUsage", "ncclRemoteError", "ncclInProgress"}
	for code, name := range want {
		if got := Result(code).String(); got != name {
			t.Errorf("Result(%d) = %q, want %q", code, got, name)
		}
	}
	if got := Result(42).String(); got != "ncclResult(42)" {
		t.Errorf("Result(42) = %q", got)
	}
}

func TestErrorClasses(t *testing.T) {
	classes := []error{ErrInProgress, ErrRemote, ErrInvalid, ErrCUDA}
	tests := []struct {
		code Result
		want error // the one class that must match; nil for none
	}{
		{UnhandledCudaError, ErrCUDA},
		{SystemError, nil},
		{InternalError, nil},
		{InvalidArgument, ErrInvalid},
		{InvalidUsage, ErrInvalid},
		{RemoteError, ErrRemote},
		{InProgress, ErrInProgress},
	}
	for _, tt := range tests {
		t.Run(tt.code.String(), func(t *testing.T) {
			err := error(&Error{Op: "ncclAllReduce", Code: tt.code, Text: "text", Detail: "detail"})
			for _, c := range classes {
				if got := errors.Is(err, c); got != (c == tt.want) {
					t.Errorf("errors.Is(%v, %v) = %v", err, c, got)
				}
			}
			msg := err.Error()
			for _, part := range []string{"nccl: ncclAllReduce", tt.code.String(), "text", "detail"} {
				if !strings.Contains(msg, part) {
					t.Errorf("%q lacks %q", msg, part)
				}
			}
		})
	}
}

func TestDataTypes(t *testing.T) {
	sizes := map[DataType]int{Int8: 1, Uint8: 1, Int32: 4, Uint32: 4, Int64: 8, Uint64: 8,
		Float16: 2, Float32: 4, Float64: 8, BFloat16: 2}
	for dt, size := range sizes {
		if got := dt.Size(); got != size {
			t.Errorf("%v.Size() = %d, want %d", dt, got, size)
		}
	}
	if BFloat16.String() != "ncclBfloat16" || Avg.String() != "ncclAvg" || Max.String() != "ncclMax" {
		t.Errorf("names: %v %v %v", BFloat16, Avg, Max)
	}
}
