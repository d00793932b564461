package cuda

import (
	"errors"
	"testing"

	icuda "github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/ptxgen"
)

// TestVariantsMatchLayout checks that the public variants and EnvPTX are
// those of the code they convert to.
func TestVariantsMatchLayout(t *testing.T) {
	if len(Variants()) != len(ptxgen.Variants) {
		t.Fatalf("%d variants, the layout has %d", len(Variants()), len(ptxgen.Variants))
	}
	for i, v := range Variants() {
		if p := ptxgen.Variants[i]; int(v) != int(p) || v.String() != p.String() {
			t.Errorf("variant %d: %v (%d), the layout's %v (%d)", i, v, int(v), p, int(p))
		}
	}
	if EnvPTX != icuda.EnvPTX {
		t.Errorf("EnvPTX = %q, the binding reads %q", EnvPTX, icuda.EnvPTX)
	}
}

// TestVariantFor checks VariantFor and Supports against the layout's
// choice, for devices on both sides of each variant's limit.
func TestVariantFor(t *testing.T) {
	for _, cc := range [][2]int{{7, 5}, {8, 0}, {8, 9}, {9, 0}, {12, 0}} {
		got, err := VariantFor(DeviceInfo{Name: "test", Major: cc[0], Minor: cc[1]})
		want, wantErr := ptxgen.VariantFor(icuda.DeviceInfo{Name: "test", Major: cc[0], Minor: cc[1]})
		if int(got) != int(want) || (err == nil) != (wantErr == nil) || err != nil && !errors.Is(err, ErrUnsupported) {
			t.Errorf("VariantFor(sm_%d%d) = %v, %v; want %v, %v", cc[0], cc[1], got, err, want, wantErr)
		}
		if got != 0 && !got.Supports(DeviceInfo{Major: cc[0], Minor: cc[1]}) {
			t.Errorf("VariantFor(sm_%d%d) = %v, which does not support the device", cc[0], cc[1], got)
		}
	}
}
