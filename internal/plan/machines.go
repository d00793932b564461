package plan

import (
	"fmt"
	"strings"
	"time"
)

// The constants of the step-time model, and the measurements they come
// from (2x H200 joined by NVLink NV18, 2026-11-30 and 2026-12-01; see
// docs/BENCHMARKS.md, examples/multigpu/results and scripts/gpu/NOTES.md):
//
//   - links: NCCL's bus bandwidth there: reduce-scatter BF16 2 GiB 271 GB/s,
//     all-gather bytes 1 GiB 260 GB/s (NVLink: 265 taken); 25 GB/s with
//     NCCL_P2P_DISABLE=1 (shared memory); 4.3 GB/s with sockets over
//     loopback (PyTorch all_gather busbw). Alphas are not measured: 10 us
//     (NVLink), 20 us (shared memory), 50 us (sockets), 25 us (network).
//   - UpdateBW: the fused AdamW update with amax of 2^28 elements, 27
//     bytes per element, 1.783 ms: 4065 GB/s.
//   - PerBucket, PerCast, NormFixed, NormBW, Sync, AmaxFixed: fitted to the
//     phases of examples/multigpu (1.42B GPT, 22 buckets, each phase waited
//     for) at d = 1 and d = 2: update 12.329 / 7.982 ms, cast 2.491 /
//     1.882, norm 5.895 / 3.504, amax 0.168 / 0.365; Sync is the barrier
//     measured inside update and cast, 0.215 ms.
//
// The H100 and H200 nodes for larger runs take these, with 8 GPUs per node,
// NVLink inside at the bandwidth measured here (NVLS off), 400 Gb/s (50
// GB/s) per GPU between nodes, and on the H100 the update slowed by its
// HBM's bandwidth (3.35 against 4.8 TB/s).

// calibrated is the H200 of the calibration runs; Intra and Inter are set
// by the regime.
var calibrated = Machine{
	Name:        "h200",
	GPUsPerNode: 8,
	UpdateBW:    4065e9,
	NormBW:      540e9,
	PerBucket:   135600 * time.Nanosecond,
	PerCast:     35 * time.Microsecond,
	NormFixed:   640 * time.Microsecond,
	Sync:        215 * time.Microsecond,
	AmaxFixed:   168 * time.Microsecond,
	PeakFLOPs:   989e12,
}

// Links of the three regimes of the two-GPU host, and of a cluster's
// network.
var (
	NVLinkH200 = Link{Name: "NVLink (measured, 2x H200)", BusBW: 265e9, Alpha: 10 * time.Microsecond}
	SharedMem  = Link{Name: "NCCL_P2P_DISABLE=1 (shared memory)", BusBW: 25e9, Alpha: 20 * time.Microsecond}
	Sockets    = Link{Name: "sockets (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1)", BusBW: 4.3e9, Alpha: 50 * time.Microsecond}
	Net400G    = Link{Name: "400 Gb/s per GPU", BusBW: 50e9, Alpha: 25 * time.Microsecond}
)

// Regime returns the two-GPU host of the calibration with every
// collective over l.
func Regime(l Link) Machine {
	m := calibrated
	m.Name, m.GPUsPerNode, m.Intra, m.Inter = "2x H200, "+l.Name, 2, l, l
	return m
}

// Clusters are the machines `distopt plan -steptime` knows: nodes of 8
// GPUs, NVLink inside, 400 Gb/s per GPU between nodes.
var Clusters = []Machine{
	cluster("h200", 4065e9),
	cluster("h100", 4065e9*3.35/4.8),
}

// cluster is calibrated with nodes of 8 GPUs, NVLink inside, 400 Gb/s per
// GPU between nodes and the update at updateBW.
func cluster(name string, updateBW float64) Machine {
	m := calibrated
	m.Name, m.Intra, m.Inter, m.UpdateBW = name+" nodes of 8 GPUs, 400 Gb/s per GPU", NVLinkH200, Net400G, updateBW
	return m
}

// LookupCluster returns the cluster named name (h100 or h200, any case).
func LookupCluster(name string) (Machine, error) {
	for _, m := range Clusters {
		if strings.HasPrefix(m.Name, strings.ToLower(name)+" ") {
			return m, nil
		}
	}
	return Machine{}, fmt.Errorf("plan: unknown cluster %q (h100 or h200)", name)
}

// Measured is a phase time measured on the two-GPU host (the reference
// of the model's calibration and check).
type Measured struct {
	Regime Link
	D      int
	Phase  string // reduce_scatter, norm, update, amax_reduce, cast, all_gather
	Time   time.Duration
	Source string
	Fitted bool // the model's constants were fitted to it (not an independent check)
}

// ms is a Duration of x milliseconds.
func ms(x float64) time.Duration { return seconds(x / 1e3) }

// Measurements are the phase times of examples/multigpu (1.42B GPT, AdamW,
// current scaling, BF16 gradients) that the model is checked against.
// They predate a fix to the example (2026-12-01, sixth session): its timing
// wrapper hid the GPU backend's optional interfaces, so the norm phase ran
// the statistics bucket by bucket (5.9 ms at d = 1, about 1.0 ms since) and
// the scales took a host round trip; the model fitted to them overestimates
// today's step until it is refitted to a new two-GPU run.
var Measurements = []Measured{
	{NVLinkH200, 2, "reduce_scatter", ms(5.465), "BENCHMARKS.md, commit 6611a63", false},
	{NVLinkH200, 2, "norm", ms(3.504), "BENCHMARKS.md", true},
	{NVLinkH200, 2, "update", ms(7.982), "BENCHMARKS.md", true},
	{NVLinkH200, 2, "amax_reduce", ms(0.365), "BENCHMARKS.md", false},
	{NVLinkH200, 2, "cast", ms(1.882), "BENCHMARKS.md", true},
	{NVLinkH200, 2, "all_gather", ms(2.639), "BENCHMARKS.md", false},
	{NVLinkH200, 1, "norm", ms(5.895), "BENCHMARKS.md", true},
	{NVLinkH200, 1, "update", ms(12.329), "BENCHMARKS.md", true},
	{NVLinkH200, 1, "amax_reduce", ms(0.168), "BENCHMARKS.md", true},
	{NVLinkH200, 1, "cast", ms(2.491), "BENCHMARKS.md", true},
	{SharedMem, 2, "reduce_scatter", ms(56.6), "issue 19", false},
	{SharedMem, 2, "all_gather", ms(26.3), "issue 19", false},
}

// Phase returns the phase of p named as in Measured.
func (p Phases) Phase(name string) (time.Duration, error) {
	switch name {
	case "reduce_scatter":
		return p.ReduceScatter, nil
	case "norm":
		return p.Norm, nil
	case "update":
		return p.Update, nil
	case "amax_reduce":
		return p.AmaxReduce, nil
	case "cast":
		return p.Cast, nil
	case "all_gather":
		return p.AllGather, nil
	}
	return 0, fmt.Errorf("plan: no phase %q", name)
}
