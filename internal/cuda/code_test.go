package cuda

import (
	"encoding/binary"
	"testing"
)

func TestCubinFor(t *testing.T) {
	c := Code{Cubins: map[int][]byte{80: {1}, 90: {2}}}
	tests := []struct {
		major, minor int
		arch         int
		ok           bool
	}{
		{7, 5, 0, false},
		{8, 0, 80, true},
		{8, 6, 80, true},
		{8, 9, 80, true},
		{9, 0, 90, true},
		{10, 0, 0, false}, // Blackwell: the PTX
		{12, 0, 0, false},
	}
	for _, tt := range tests {
		arch, ok := c.CubinFor(DeviceInfo{Major: tt.major, Minor: tt.minor})
		if arch != tt.arch || ok != tt.ok {
			t.Errorf("CubinFor(sm_%d%d) = %d, %v; want %d, %v", tt.major, tt.minor, arch, ok, tt.arch, tt.ok)
		}
	}
	c = Code{Cubins: map[int][]byte{86: {1}}}
	if _, ok := c.CubinFor(DeviceInfo{Major: 8, Minor: 0}); ok {
		t.Error("an sm_86 cubin chosen for sm_80")
	}
	if arch, ok := c.CubinFor(DeviceInfo{Major: 8, Minor: 9}); arch != 86 || !ok {
		t.Errorf("CubinFor(sm_89) with an sm_86 cubin = %d, %v", arch, ok)
	}
}

// elfHeader returns an ELF header of class (1: 32 bits, 2: 64) whose
// flags are flags, as ptxas writes them.
func elfHeader(class byte, flags uint32) []byte {
	b := make([]byte, 64)
	copy(b, "\x7fELF")
	b[4], b[5] = class, 1
	off := 48
	if class == 1 {
		off = 36
	}
	binary.LittleEndian.PutUint32(b[off:], flags)
	return b
}

func TestImageOf(t *testing.T) {
	tests := []struct {
		name string
		b    []byte
		want Image
	}{
		{"sm_90 cubin", elfHeader(2, 0x5a055a), Image{Cubin: true, Arch: 90}},
		{"sm_80 cubin", elfHeader(2, 0x500550), Image{Cubin: true, Arch: 80}},
		{"32-bit cubin", elfHeader(1, 0x56), Image{Cubin: true, Arch: 86}},
		{"PTX", []byte("//\n.version 7.8\n.target sm_90\n"), Image{}},
		{"truncated ELF", []byte("\x7fELF\x02\x01"), Image{}},
	}
	for _, tt := range tests {
		if got := ImageOf(tt.b); got != tt.want {
			t.Errorf("%s: ImageOf = %+v, want %+v", tt.name, got, tt.want)
		}
	}
	if s := (Image{Cubin: true, Arch: 90}).String(); s != "sm_90 cubin" {
		t.Errorf("String = %q", s)
	}
}

func TestForcePTX(t *testing.T) {
	for v, want := range map[string]bool{"": false, "0": false, "1": true} {
		t.Setenv(EnvPTX, v)
		if got, err := ForcePTX(); got != want || err != nil {
			t.Errorf("%s=%q: ForcePTX = %v, %v; want %v", EnvPTX, v, got, err, want)
		}
	}
	t.Setenv(EnvPTX, "yes")
	if _, err := ForcePTX(); err == nil {
		t.Errorf("%s=yes accepted", EnvPTX)
	}
}
