package kernels

import (
	"testing"

	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/internal/ptxgen"
)

// testOnlyKernels are the kernels no launcher uses that the tests keep:
// gradstats.cu's first kernels, their second GPU implementation.
var testOnlyKernels = []string{"grad_stats_v1_f32", "grad_stats_v1_bf16"}

// reachableKernels lists every kernel name a launcher of this package can
// request: launcherKernels, and the names built from a launch's
// configuration elsewhere (every moment type of PerMoment, the statistics
// configuration, the quantization, dequantization and cast formats).
func reachableKernels() []string {
	names := launcherKernels()
	moments := []MomentType{MomentF32, MomentBF16, MomentFP8}
	for _, r := range []Rule{RuleNone, RuleAdamW, RuleSGD} {
		for _, f := range []fp8.Format{fp8.E4M3, fp8.E5M2} {
			for flags := range 4 { // gradient bf16, tiles
				for _, m := range moments {
					for _, v := range moments {
						a := UpdateLaunch{Rule: r, Format: f, GradBF16: flags&1 != 0, PerMoment: true, MType: m, VType: v}
						a.Table.Tiles = flags&2 != 0
						names = append(names, a.updateKernel())
					}
				}
			}
		}
	}
	for _, c := range gradStatsConfigs {
		for _, e := range []string{"f32", "bf16"} {
			names = append(names, "grad_stats_"+e+c.suffix, "grad_stats_table_"+e+c.suffix)
		}
	}
	names = append(names, "grad_stats_normalize", kernelTranspose, kernelScaleGrid)
	names = append(names, quantKernels()...)
	for _, f := range []fp8.Format{fp8.E4M3, fp8.E5M2} {
		names = append(names, "dequant_bf16_"+fmtName(f), "segcast_"+formatName(f))
	}
	return names
}

// TestKernelsReachable checks that the modules define exactly the kernels a
// launcher can request (and the tests' own): none missing, and none built
// for nothing, each costing start-up time and binary size.
func TestKernelsReachable(t *testing.T) {
	for _, err := range ptxgen.CheckKernels(ptxFiles, append(reachableKernels(), testOnlyKernels...)) {
		t.Error(err)
	}
}

// TestCubins checks the machine code shipped: every module but those of
// the file ptxonly has, for each variant, one cubin for the architecture
// the variant targets (sm_80, sm_90), built for it (the ELF header's
// architecture), defining exactly the kernels of the variant's PTX.
func TestCubins(t *testing.T) {
	ptxOnly, err := ptxgen.PTXOnly(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range ptxgen.CheckCubins(ptxFiles, ptxOnly) {
		t.Error(err)
	}
}
