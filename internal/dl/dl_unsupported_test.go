//go:build !cgo || !linux

package dl_test

import (
	"errors"
	"testing"

	"github.com/distopt/distopt/internal/dl"
)

func TestOpenUnsupported(t *testing.T) {
	lib, err := dl.Open("libc.so.6", 0)
	if lib != nil || !errors.Is(err, dl.ErrUnsupported) {
		t.Fatalf("Open = %v, %v; want nil, ErrUnsupported", lib, err)
	}
}
