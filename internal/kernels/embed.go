package kernels

import (
	"embed"

	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/ptxgen"
)

// ptxFiles holds gen.sh's output: the PTX of every module and variant, and
// the cubins of each variant for the architecture it targets.
//
//go:embed ptx/*.ptx cubin/*.cubin
var ptxFiles embed.FS

// ErrUnsupported is returned for a device older than compute capability 8.0.
var ErrUnsupported = ptxgen.ErrUnsupported

// Variant is one of the two PTX builds of every module.
type Variant = ptxgen.Variant

const (
	// SM80 is PTX for compute_80: FP8 conversions in integer code. It runs
	// on every device of compute capability 8.0 and up.
	SM80 = ptxgen.SM80
	// SM90 is PTX for compute_90: FP8 conversions by the hardware
	// instructions. It needs compute capability 9.0.
	SM90 = ptxgen.SM90
)

// Variants lists every variant, oldest first.
var Variants = ptxgen.Variants

// VariantFor returns the variant Load uses on a device: SM90 from compute
// capability 9.0, SM80 from 8.0, and ErrUnsupported below.
func VariantFor(info cuda.DeviceInfo) (Variant, error) { return ptxgen.VariantFor(info) }

// Modules returns the names of the embedded modules (the .cu files), sorted.
func Modules() []string { return ptxgen.Modules(ptxFiles) }

// PTX returns the embedded PTX text of module in variant v.
func PTX(module string, v Variant) ([]byte, error) { return ptxgen.PTX(ptxFiles, module, v) }

// code returns the embedded PTX and cubins of module in variant v.
func code(module string, v Variant) (cuda.Code, error) {
	return ptxgen.Load(ptxFiles, "ptx", "cubin", module, v.String())
}

// entries returns the kernel names that a PTX text defines.
func entries(ptx []byte) []string { return ptxgen.Entries(ptx) }
