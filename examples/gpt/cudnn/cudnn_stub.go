//go:build !cgo || !linux

package cudnn

// Without cgo (or off Linux) no library can be opened: openTable fails, so
// Open and Default fail with ErrNoLibrary and nothing else here is reached.
// The stub exists so that the package builds.

import "errors"

func openTable(path string) (api, error) {
	return nil, errors.New("a build without cgo cannot open " + path)
}

// hostScalar stands for the C float of a by-value tensor.
type hostScalar struct{ v *float32 }

func newHostScalar(v float32) hostScalar { return hostScalar{v: &v} }

func (h hostScalar) addr() uintptr { return 0 }

func (h hostScalar) free() {}

func loadOnly(string) {}
