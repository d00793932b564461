package cuda

import (
	icuda "github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/ptxgen"
)

// Variant is one of the two builds of a Library's modules. Both come from
// the same CUDA sources.
type Variant int

const (
	// SM80 is PTX for compute_80 and its sm_80 machine code. It converts
	// FP8 in integer code, and runs on compute capability 8.0 and up.
	SM80 Variant = iota + 1
	// SM90 is PTX for compute_90 and its sm_90 machine code. It converts
	// FP8 in hardware, and needs compute capability 9.0.
	SM90
)

// Variants returns every variant, oldest first.
func Variants() []Variant { return []Variant{SM80, SM90} }

func (v Variant) String() string { return ptxgen.Variant(v).String() }

// Arch returns the architecture of v's cubins: 80 (sm_80) for SM80, 90
// for SM90.
func (v Variant) Arch() int { return ptxgen.Variant(v).Arch() }

// Supports reports whether a device described by info can run v.
func (v Variant) Supports(info DeviceInfo) bool { return ptxgen.Variant(v).Supports(info.internal()) }

// VariantFor returns the newest variant a device runs: SM90 from compute
// capability 9.0, SM80 from 8.0. Below 8.0 the error matches
// ErrUnsupported.
func VariantFor(info DeviceInfo) (Variant, error) {
	v, err := ptxgen.VariantFor(info.internal())
	return Variant(v), err
}

// internal returns the fields of info the variants read.
func (i DeviceInfo) internal() icuda.DeviceInfo {
	return icuda.DeviceInfo{Ordinal: i.Ordinal, Name: i.Name, Major: i.Major, Minor: i.Minor}
}
