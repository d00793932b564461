package cudnn

import (
	"errors"
	"strings"
	"testing"
)

// TestOpenMissing checks the error of a library that is not there: it
// matches ErrNoLibrary, names every path tried and says how to get cuDNN.
func TestOpenMissing(t *testing.T) {
	t.Setenv(EnvLibrary, "/nonexistent/libcudnn.so.9")
	_, err := openFirst(candidates())
	if !errors.Is(err, ErrNoLibrary) {
		t.Fatalf("error %v, want one matching ErrNoLibrary", err)
	}
	for _, want := range []string{"/nonexistent/libcudnn.so.9", "nvidia-cudnn-cu13", EnvLibrary} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// TestOpenNotCuDNN opens a library that loads but is not cuDNN.
func TestOpenNotCuDNN(t *testing.T) {
	_, err := Open("libc.so.6")
	if !errors.Is(err, ErrNoLibrary) {
		t.Fatalf("error %v, want one matching ErrNoLibrary", err)
	}
}

// TestCandidates checks the search order without CUDNN_LIBRARY: the
// soname first.
func TestCandidates(t *testing.T) {
	t.Setenv(EnvLibrary, "")
	c := candidates()
	if len(c) < len(LibraryNames) || c[0] != "libcudnn.so.9" {
		t.Errorf("candidates %v: want libcudnn.so.9 first", c)
	}
}

func TestVersionString(t *testing.T) {
	for v, want := range map[int]string{91900: "9.19.0", 90100: "9.1.0", 8907: "8.9.7"} {
		if got := versionString(v); got != want {
			t.Errorf("versionString(%d) = %s, want %s", v, got, want)
		}
	}
}

// TestCloseTwice checks that Close of a nil or already closed Attention
// does nothing (Close zeroes the value; a second Close used to call the
// zero value's nil device).
func TestCloseTwice(t *testing.T) {
	var nilA *Attention
	if err := nilA.Close(); err != nil {
		t.Errorf("nil Close: %v", err)
	}
	closed := &Attention{}
	for i := 0; i < 2; i++ {
		if err := closed.Close(); err != nil {
			t.Errorf("Close %d of a closed Attention: %v", i, err)
		}
	}
}
