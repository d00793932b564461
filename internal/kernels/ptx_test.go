package kernels

import (
	"bytes"
	"slices"
	"testing"

	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/internal/ptxgen"
)

// launcherKernels lists every kernel name a launcher of this package uses.
func launcherKernels() []string {
	names := []string{kernelBF16, kernelIota, kernelStepControl, kernelScales, kernelDelayed, kernelAccumulateBF16, kernelAccumulateF32}
	names = append(names, gradKernels()...)
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
	for _, err := range ptxgen.CheckTargets(ptxFiles) {
		t.Error(err)
	}
	ptx, err := PTX("fp8", SM90)
	if err != nil {
		t.Fatal(err)
	}
	for _, ins := range ptxgen.HardwareFP8 {
		if !bytes.Contains(ptx, []byte(ins)) {
			t.Errorf("fp8_sm90: PTX lacks %s", ins)
		}
	}
}
