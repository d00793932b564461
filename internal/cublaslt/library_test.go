package cublaslt

import (
	"errors"
	"strings"
	"testing"
)

// TestOpenMissing checks that a library that is not there gives
// ErrNoLibrary naming it, not a panic.
func TestOpenMissing(t *testing.T) {
	_, err := Open("/nonexistent/libcublasLt.so.99")
	if !errors.Is(err, ErrNoLibrary) || !strings.Contains(err.Error(), "/nonexistent/libcublasLt.so.99") {
		t.Fatalf("Open of a missing library: %v, want ErrNoLibrary naming it", err)
	}
}

// TestDefault checks Default on whatever host runs the test: either it
// opens a cuBLASLt of MinVersion or later, or it fails with ErrNoLibrary
// naming every library it tried.
func TestDefault(t *testing.T) {
	l, err := Default()
	if err != nil {
		if !errors.Is(err, ErrNoLibrary) {
			t.Fatalf("Default: %v, want an error matching ErrNoLibrary", err)
		}
		for _, n := range LibraryNames {
			if !strings.Contains(err.Error(), n) {
				t.Errorf("Default's error does not name %s: %v", n, err)
			}
		}
		t.Logf("no cuBLASLt here: %v", err)
		return
	}
	if l.Version() < MinVersion {
		t.Errorf("%v older than %d", l, MinVersion)
	}
	t.Logf("%v, block scaling %t", l, l.BlockScaling())
}

func TestVersionString(t *testing.T) {
	for v, want := range map[int]string{130100: "13.1.0", 120903: "12.9.3", 120000: "12.0.0"} {
		if got := versionString(v); got != want {
			t.Errorf("versionString(%d) = %q, want %q", v, got, want)
		}
	}
}

func TestStatus(t *testing.T) {
	e := &Error{Op: "cublasLtMatmul", Status: StatusNotSupported, Detail: "shapes"}
	if !errors.Is(e, ErrNotSupported) || errors.Is(e, ErrInvalid) {
		t.Errorf("%v: matches wrong sentinels", e)
	}
	if got := e.Error(); got != "cublaslt: cublasLtMatmul: CUBLAS_STATUS_NOT_SUPPORTED (shapes)" {
		t.Errorf("Error() = %q", got)
	}
	if check("x", StatusSuccess) != nil || !errors.Is(check("x", StatusInvalidValue), ErrInvalid) {
		t.Error("check maps statuses wrongly")
	}
	if s := Status(99).String(); s != "cublasStatus(99)" {
		t.Errorf("unknown status prints %q", s)
	}
}
