package kernels

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"

	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/ptxgen"
)

// ptxFiles holds gen.sh's output: the PTX of every module and variant, and
// the cubins of each variant for the architecture it targets.
//
//go:embed ptx/*.ptx cubin/*.cubin
var ptxFiles embed.FS

// ErrUnsupported is returned for a device older than compute capability 8.0.
var ErrUnsupported = errors.New("kernels: device not supported (compute capability 8.0 or newer needed)")

// Variant is one of the two PTX builds of every module.
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

// supports reports whether a device of the given compute capability can run
// v's PTX.
func (v Variant) supports(info cuda.DeviceInfo) bool {
	switch v {
	case SM80:
		return info.AtLeast(8, 0)
	case SM90:
		return info.AtLeast(9, 0)
	}
	return false
}

// VariantFor returns the variant Load uses on a device: SM90 from compute
// capability 9.0, SM80 from 8.0, and ErrUnsupported below.
func VariantFor(info cuda.DeviceInfo) (Variant, error) {
	for i := len(Variants) - 1; i >= 0; i-- {
		if Variants[i].supports(info) {
			return Variants[i], nil
		}
	}
	return 0, fmt.Errorf("%w: %s is sm_%d%d", ErrUnsupported, info.Name, info.Major, info.Minor)
}

// Modules returns the names of the embedded modules (the .cu files), sorted.
func Modules() []string {
	seen := map[string]bool{}
	entries, _ := fs.ReadDir(ptxFiles, "ptx")
	for _, e := range entries {
		name, _, ok := strings.Cut(strings.TrimSuffix(e.Name(), ".ptx"), "_sm")
		if ok {
			seen[name] = true
		}
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// PTX returns the embedded PTX text of module in variant v.
func PTX(module string, v Variant) ([]byte, error) {
	b, err := fs.ReadFile(ptxFiles, fmt.Sprintf("ptx/%s_%s.ptx", module, v))
	if err != nil {
		return nil, fmt.Errorf("kernels: no PTX for module %q, variant %v: %w", module, v, err)
	}
	return b, nil
}

// code returns the embedded PTX and cubins of module in variant v.
func code(module string, v Variant) (cuda.Code, error) {
	c, err := ptxgen.Load(ptxFiles, "ptx", "cubin", module, v.String())
	if err != nil {
		return cuda.Code{}, fmt.Errorf("kernels: %w", err)
	}
	return c, nil
}

// entries returns the kernel names that a PTX text defines.
func entries(ptx []byte) []string { return ptxgen.Entries(ptx) }
