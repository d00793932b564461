//go:build cgo && linux

package dl_test

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/distopt/distopt/internal/dl"
)

func TestOpenLookupClose(t *testing.T) {
	lib, err := dl.Open("libc.so.6", 0)
	if err != nil {
		t.Fatalf("Open(libc.so.6): %v", err)
	}
	if lib.Name() != "libc.so.6" {
		t.Errorf("Name() = %q", lib.Name())
	}
	p, err := lib.Lookup("strlen")
	if err != nil || p == nil {
		t.Fatalf("Lookup(strlen) = %v, %v", p, err)
	}
	// A second reference to the same library resolves to the same address.
	lib2, err := dl.Open("libc.so.6", dl.Lazy|dl.Local)
	if err != nil {
		t.Fatalf("second Open: %v", err)
	}
	p2, err := lib2.Lookup("strlen")
	if err != nil || p2 != p {
		t.Errorf("second Lookup(strlen) = %v, %v; want %v", p2, err, p)
	}
	if err := lib2.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := lib.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := lib.Lookup("strlen"); !errors.Is(err, dl.ErrClosed) {
		t.Errorf("Lookup after Close: %v, want ErrClosed", err)
	}
	if err := lib.Close(); !errors.Is(err, dl.ErrClosed) {
		t.Errorf("second Close: %v, want ErrClosed", err)
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name    string
		lib     string
		symbol  string
		want    error
		message string // expected inside the error text
	}{
		{"missing library", "libdistopt-no-such-library.so.7", "", dl.ErrOpen, "libdistopt-no-such-library.so.7"},
		{"missing path", "/nonexistent/dir/libx.so", "", dl.ErrOpen, "/nonexistent/dir/libx.so"},
		{"missing symbol", "libc.so.6", "distopt_no_such_symbol", dl.ErrSymbol, "distopt_no_such_symbol"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lib, err := dl.Open(tt.lib, dl.Now)
			if tt.symbol != "" {
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				defer lib.Close()
				_, err = lib.Lookup(tt.symbol)
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("error %v, want %v", err, tt.want)
			}
			var de *dl.Error
			if !errors.As(err, &de) || de.Message == "" {
				t.Errorf("error %#v carries no dlerror message", err)
			}
			if !strings.Contains(err.Error(), tt.message) {
				t.Errorf("error %q does not name %q", err, tt.message)
			}
		})
	}
}

// TestConcurrentLookup runs lookups from many goroutines at once: with -race
// it checks the locking, and every lookup must see its own error text.
func TestConcurrentLookup(t *testing.T) {
	lib, err := dl.Open("libc.so.6", 0)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer lib.Close()
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			for range 100 {
				if i%2 == 0 {
					if _, err := lib.Lookup("malloc"); err != nil {
						t.Errorf("Lookup(malloc): %v", err)
						return
					}
				} else {
					_, err := lib.Lookup("distopt_missing")
					if !errors.Is(err, dl.ErrSymbol) || !strings.Contains(err.Error(), "distopt_missing") {
						t.Errorf("Lookup(distopt_missing): %v", err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
}
