package cuda

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
)

// EnvPTX names the environment variable that makes LoadCode compile the
// PTX with the driver's JIT ("1") even where machine code is shipped, to
// compare the two or to rule the machine code out.
const EnvPTX = "DISTOPT_CUDA_PTX"

// Code is one kernel module as shipped: its PTX, which any newer GPU can
// JIT-compile, and cubins (machine code from ptxas) for some architectures.
type Code struct {
	Name   string         // for errors and logs
	PTX    []byte         // NUL-free PTX text
	Cubins map[int][]byte // by architecture: 80 for sm_80, 90 for sm_90
}

// Image says what a module was loaded from.
type Image struct {
	Cubin bool // machine code, else PTX compiled by the driver's JIT
	Arch  int  // the cubin's architecture (90 for sm_90); 0 for PTX
}

func (i Image) String() string {
	if i.Cubin {
		return fmt.Sprintf("sm_%d cubin", i.Arch)
	}
	return "PTX (driver JIT)"
}

// CubinFor returns the architecture of c's cubin that runs on a device of
// compute capability info: the same major version and the highest minor
// one not above the device's (a cubin for 8.0 runs on 8.6 and 8.9, not on
// 9.0). ok is false when c has none.
func (c Code) CubinFor(info DeviceInfo) (arch int, ok bool) {
	for a := range c.Cubins {
		if a/10 == info.Major && a%10 <= info.Minor && a > arch {
			arch, ok = a, true
		}
	}
	return arch, ok
}

// ForcePTX reports whether DISTOPT_CUDA_PTX asks for the PTX: "1" yes, ""
// or "0" no, anything else an error.
func ForcePTX() (bool, error) {
	switch v := os.Getenv(EnvPTX); v {
	case "", "0":
		return false, nil
	case "1":
		return true, nil
	default:
		return false, fmt.Errorf("cuda: %s=%q: want 1 (JIT-compile the PTX) or 0", EnvPTX, v)
	}
}

// LoadCode loads c on d from the cubin for d's architecture when c has one
// and DISTOPT_CUDA_PTX is not 1, else from the PTX through the driver's JIT
// (slow on a fresh machine: the driver caches the result). The module's
// Image says which.
func (d *Device) LoadCode(c Code) (*Module, error) {
	force, err := ForcePTX()
	if err != nil {
		return nil, err
	}
	if arch, ok := c.CubinFor(d.Info()); ok && !force {
		return d.LoadModule(c.Cubins[arch])
	}
	if len(c.PTX) == 0 {
		return nil, fmt.Errorf("cuda: module %s has neither PTX nor a cubin for sm_%d%d", c.Name, d.Info().Major, d.Info().Minor)
	}
	return d.LoadModule(c.PTX)
}

// elfMagic starts every cubin (an ELF file).
var elfMagic = []byte("\x7fELF")

// ImageOf tells a cubin from PTX text: a cubin is an ELF file whose header
// flags carry its architecture in their low byte.
func ImageOf(b []byte) Image {
	if !bytes.HasPrefix(b, elfMagic) || len(b) < 52 {
		return Image{}
	}
	off := 48 // e_flags of ELF64
	if b[4] == 1 {
		off = 36 // ELF32
	}
	return Image{Cubin: true, Arch: int(binary.LittleEndian.Uint32(b[off:]) & 0xff)}
}
