package kernels

import (
	"maps"
	"slices"
	"testing"

	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/ptxgen"
)

// arch is the architecture of each variant's cubins.
var arch = map[Variant]int{SM80: 80, SM90: 90}

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
	names = append(names, attentionKernels()...)
	for _, f := range []fp8.Format{fp8.E4M3, fp8.E5M2} {
		names = append(names, "dequant_bf16_"+fmtName(f), "segcast_"+formatName(f))
	}
	return names
}

// TestKernelsReachable checks that the modules define exactly the kernels a
// launcher can request (and the tests' own): none missing, and none built
// for nothing, each costing start-up time and binary size.
func TestKernelsReachable(t *testing.T) {
	want := map[string]bool{}
	for _, n := range append(reachableKernels(), testOnlyKernels...) {
		want[n] = true
	}
	defined := map[string]bool{}
	for _, m := range Modules() {
		for _, v := range Variants {
			ptx, err := PTX(m, v)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range entries(ptx) {
				defined[n] = true
				if !want[n] {
					t.Errorf("%s_%v defines %s, which no launcher requests: remove it from %s.cu", m, v, n, m)
				}
			}
		}
	}
	for n := range want {
		if !defined[n] {
			t.Errorf("kernel %s is requested but no module defines it", n)
		}
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
	for m := range ptxOnly {
		if !slices.Contains(Modules(), m) {
			t.Errorf("ptxonly names %s, which is no module", m)
		}
	}
	for _, m := range Modules() {
		for _, v := range Variants {
			c, err := code(m, v)
			if err != nil {
				t.Fatal(err)
			}
			if ptxOnly[m] {
				if len(c.Cubins) != 0 {
					t.Errorf("%s_%v: cubins for %v, but ptxonly names it", m, v, slices.Sorted(maps.Keys(c.Cubins)))
				}
				continue
			}
			if len(c.Cubins) != 1 || c.Cubins[arch[v]] == nil {
				t.Errorf("%s_%v: cubins for %v, want sm_%d only", m, v, slices.Sorted(maps.Keys(c.Cubins)), arch[v])
				continue
			}
			cubin := c.Cubins[arch[v]]
			if got := cuda.ImageOf(cubin); got != (cuda.Image{Cubin: true, Arch: arch[v]}) {
				t.Errorf("%s_%v: the cubin is %v, want sm_%d", m, v, got, arch[v])
			}
			names, err := ptxgen.CubinEntries(cubin)
			if err != nil {
				t.Fatalf("%s_%v: %v", m, v, err)
			}
			want := entries(c.PTX)
			slices.Sort(want)
			if !slices.Equal(names, want) {
				t.Errorf("%s_%v: the cubin defines %v, the PTX %v", m, v, names, want)
			}
		}
	}
}
