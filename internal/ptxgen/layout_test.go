package ptxgen

import (
	"bytes"
	"testing"
	"testing/fstest"
)

// TestLoad checks that Load takes a module's own cubins, by the file names
// gen.sh writes, and not those of a module whose name starts alike.
func TestLoad(t *testing.T) {
	fsys := fstest.MapFS{
		"ptx/gpt_sm90.ptx":                {Data: []byte("gpt 90")},
		"ptx/gptrows_sm90.ptx":            {Data: []byte("gptrows 90")},
		"ptx/gpt_sm80.ptx":                {Data: []byte("gpt 80")},
		"cubin/gpt_sm90.sm_90.cubin":      {Data: []byte("gpt 90 on 90")},
		"cubin/gptrows_sm90.sm_90.cubin":  {Data: []byte("gptrows 90 on 90")},
		"cubin/gpt_sm80.sm_80.cubin":      {Data: []byte("gpt 80 on 80")},
		"cubin/gpt_sm80.sm_86.cubin":      {Data: []byte("gpt 80 on 86")},
		"cubin/gpt_sm80.sm_80.cubin.orig": {Data: []byte("not a cubin's name")},
	}
	tests := []struct {
		module, variant, ptx string
		cubins               map[int]string
	}{
		{"gpt", "sm90", "gpt 90", map[int]string{90: "gpt 90 on 90"}},
		{"gptrows", "sm90", "gptrows 90", map[int]string{90: "gptrows 90 on 90"}},
		{"gpt", "sm80", "gpt 80", map[int]string{80: "gpt 80 on 80", 86: "gpt 80 on 86"}},
	}
	for _, tt := range tests {
		c, err := Load(fsys, "ptx", "cubin", tt.module, tt.variant)
		if err != nil {
			t.Fatal(err)
		}
		if string(c.PTX) != tt.ptx || c.Name != tt.module+"_"+tt.variant {
			t.Errorf("%s_%s: PTX %q, name %q", tt.module, tt.variant, c.PTX, c.Name)
		}
		if len(c.Cubins) != len(tt.cubins) {
			t.Errorf("%s_%s: %d cubins, want %d", tt.module, tt.variant, len(c.Cubins), len(tt.cubins))
		}
		for arch, want := range tt.cubins {
			if !bytes.Equal(c.Cubins[arch], []byte(want)) {
				t.Errorf("%s_%s: sm_%d cubin %q, want %q", tt.module, tt.variant, arch, c.Cubins[arch], want)
			}
		}
	}
	if _, err := Load(fsys, "ptx", "cubin", "gptrows", "sm80"); err == nil {
		t.Error("Load of a module without PTX succeeded")
	}
}

func TestEntries(t *testing.T) {
	ptx := []byte(".version 7.8\n.visible .entry first(\n\t.param .u64 a\n)\n{\n}\n.entry hidden(\n)\n.visible .entry second(\n)\n")
	got := Entries(ptx)
	if len(got) != 2 || got[0] != "first" || got[1] != "second" {
		t.Errorf("Entries = %v, want [first second]", got)
	}
	if _, err := CubinEntries([]byte(".version 7.8")); err == nil {
		t.Error("CubinEntries of PTX text succeeded")
	}
}

func TestParsePTXOnly(t *testing.T) {
	got := parsePTXOnly([]byte("# modules without cubins\nflash   # slower from ptxas\n\n  gemmish\n"))
	if len(got) != 2 || !got["flash"] || !got["gemmish"] {
		t.Errorf("parsePTXOnly = %v, want flash and gemmish", got)
	}
	none, err := PTXOnly(t.TempDir())
	if err != nil || len(none) != 0 {
		t.Errorf("PTXOnly of a directory without the file = %v, %v", none, err)
	}
}
