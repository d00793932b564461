package ptxgen

import (
	"errors"
	"fmt"

	"github.com/distopt/distopt/internal/cuda"
)

// ErrUnsupported is returned for a device older than compute capability 8.0.
var ErrUnsupported = errors.New("kernels: device not supported (compute capability 8.0 or newer needed)")

// Variant is one of the two PTX builds of every module (gen.sh).
type Variant int

const (
	// SM80 is PTX for compute_80: FP8 conversions in integer code. It runs
	// on every device of compute capability 8.0 and up.
	SM80 Variant = iota + 1
	// SM90 is PTX for compute_90: FP8 conversions by the hardware
	// instructions. It needs compute capability 9.0.
	SM90
)

// Variants lists every variant, oldest first.
var Variants = []Variant{SM80, SM90}

func (v Variant) String() string {
	switch v {
	case SM80:
		return "sm80"
	case SM90:
		return "sm90"
	}
	return fmt.Sprintf("Variant(%d)", int(v))
}

// Supports reports whether a device of the given compute capability can
// run v's PTX.
func (v Variant) Supports(info cuda.DeviceInfo) bool {
	switch v {
	case SM80:
		return info.AtLeast(8, 0)
	case SM90:
		return info.AtLeast(9, 0)
	}
	return false
}

// VariantFor returns the newest variant a device runs: SM90 from compute
// capability 9.0, SM80 from 8.0, and ErrUnsupported below.
func VariantFor(info cuda.DeviceInfo) (Variant, error) {
	for i := len(Variants) - 1; i >= 0; i-- {
		if Variants[i].Supports(info) {
			return Variants[i], nil
		}
	}
	return 0, fmt.Errorf("%w: %s is sm_%d%d", ErrUnsupported, info.Name, info.Major, info.Minor)
}

// Arch returns the architecture v's cubins are built for: 80 for SM80, 90
// for SM90.
func (v Variant) Arch() int {
	switch v {
	case SM80:
		return 80
	case SM90:
		return 90
	}
	return 0
}
