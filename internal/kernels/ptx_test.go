package kernels

import (
	"bytes"
	"errors"
	"github.com/distopt/distopt/fp8"
	"slices"
	"strings"
	"testing"

	"github.com/distopt/distopt/internal/cuda"
)

// launcherKernels lists every kernel name a launcher of this package uses.
func launcherKernels() []string {
	names := []string{kernelBF16, kernelIota, kernelStepControl, kernelScales, kernelDelayed, kernelAccumulateBF16, kernelAccumulateF32}
	names = append(names, gradKernels()...)
	names = append(names, gptKernels()...)
	names = append(names, flashKernels()...)
	for _, k := range fp8Kernels {
		names = append(names, k.encode, k.decode, k.castScaled)
	}
	for _, r := range []Rule{RuleNone, RuleAdamW, RuleSGD} {
		for _, f := range []fp8.Format{fp8.E4M3, fp8.E5M2} {
			for flags := range 16 { // moment bf16, gradient bf16, tiles, per-moment storage
				a := UpdateLaunch{Rule: r, Format: f, MomentBF16: flags&1 != 0, GradBF16: flags&2 != 0, PerMoment: flags&8 != 0}
				a.Table.Tiles = flags&4 != 0
				for _, mv := range [][2]MomentType{{MomentF32, MomentF32}, {MomentFP8, MomentFP8}, {MomentFP8, MomentBF16}} {
					a.MType, a.VType = mv[0], mv[1]
					names = append(names, a.updateKernel())
				}
			}
		}
	}
	return names
}

// TestEntries checks that every module exists in every variant with the same
// kernels, and that every kernel a launcher names is defined.
func TestEntries(t *testing.T) {
	mods := Modules()
	if len(mods) == 0 {
		t.Fatal("no embedded modules")
	}
	defined := map[string]bool{}
	for _, m := range mods {
		var first []string
		for _, v := range Variants {
			ptx, err := PTX(m, v)
			if err != nil {
				t.Fatal(err)
			}
			names := entries(ptx)
			slices.Sort(names)
			if len(names) == 0 {
				t.Errorf("%s_%v defines no kernel", m, v)
			}
			if first == nil {
				first = names
			} else if !slices.Equal(first, names) {
				t.Errorf("%s: variants define different kernels: %v and %v", m, first, names)
			}
			for _, n := range names {
				defined[n] = true
			}
		}
	}
	for _, n := range launcherKernels() {
		if !defined[n] {
			t.Errorf("launcher kernel %q is defined by no module", n)
		}
	}
}

// TestPTXTargets checks how each variant was generated: the PTX ISA version
// that every driver from 520 on loads, the target, and the FP8 conversion
// path (hardware instructions in sm90 only, so that the sm80 PTX really
// tests the software path).
func TestPTXTargets(t *testing.T) {
	hw := [][]byte{[]byte("cvt.rn.satfinite.e4m3x2.f32"), []byte("cvt.rn.satfinite.e5m2x2.f32"),
		[]byte("cvt.rn.f16x2.e4m3x2"), []byte("cvt.rn.f16x2.e5m2x2")}
	for _, m := range Modules() {
		for _, v := range Variants {
			ptx, _ := PTX(m, v)
			t.Run(m+"_"+v.String(), func(t *testing.T) {
				for _, want := range []string{"Cuda compilation tools, release 11.8", "\n.version 7.8\n",
					"\n.target sm_" + strings.TrimPrefix(v.String(), "sm") + "\n", "\n.address_size 64\n"} {
					if !bytes.Contains(ptx, []byte(want)) {
						t.Errorf("PTX lacks %q", want)
					}
				}
				for _, ins := range hw {
					if v == SM80 && bytes.Contains(ptx, ins) {
						t.Errorf("sm80 PTX uses the hardware conversion %s", ins)
					}
				}
				if m == "fp8" && v == SM90 {
					for _, ins := range hw {
						if !bytes.Contains(ptx, ins) {
							t.Errorf("sm90 PTX lacks %s", ins)
						}
					}
				}
			})
		}
	}
}

func TestVariantFor(t *testing.T) {
	tests := []struct {
		major, minor int
		want         Variant
		err          error
	}{
		{7, 5, 0, ErrUnsupported},
		{8, 0, SM80, nil},
		{8, 9, SM80, nil},
		{9, 0, SM90, nil},
		{10, 0, SM90, nil},
		{12, 0, SM90, nil},
	}
	for _, tt := range tests {
		info := cuda.DeviceInfo{Name: "test", Major: tt.major, Minor: tt.minor}
		got, err := VariantFor(info)
		if got != tt.want || !errors.Is(err, tt.err) {
			t.Errorf("VariantFor(sm_%d%d) = %v, %v; want %v, %v", tt.major, tt.minor, got, err, tt.want, tt.err)
		}
	}
}

// checkDefined checks that module defines every kernel of names in every
// variant's PTX (CPU only: the launchers of a module must find their
// kernels).
func checkDefined(t *testing.T, module string, names []string) {
	t.Helper()
	for _, v := range Variants {
		ptx, err := PTX(module, v)
		if err != nil {
			t.Fatal(err)
		}
		defined := entries(ptx)
		for _, n := range names {
			if !slices.Contains(defined, n) {
				t.Errorf("%s_%v does not define %s (it defines %v)", module, v, n, defined)
			}
		}
	}
}
