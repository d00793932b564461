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
//   - UpdateBW, PerBucket, PerCast, NormBW, NormFixed, AmaxFixed: fitted to
//     the phases of examples/multigpu (1.42B GPT, 22 buckets, each phase
//     waited for, medians of 5) at d = 1 on one H200 (2026-12-01, eighth
//     session: the update and the cast one launch for every bucket, the
//     statistics one launch): update 9.556 ms (27 bytes per parameter:
//     4009 GB/s; no per-bucket cost left), cast 1.887 ms (5 bytes per
//     parameter at the same bandwidth, and 5.3 us per bucket), norm
//     0.977 ms (the statistics kernel 0.83 ms for 2.84 GB under ncu: 3419
//     GB/s, and 0.147 ms fixed), amax 0.090 ms.
//   - Sync, the cost of a waited collective beyond its alpha-beta time:
//     the barrier measured inside update and cast at d = 2 (0.215 ms,
//     2026-11-30). The d = 2 phases of the update, cast, norm and amax of
//     that day predate the one-launch kernels and the example's fix; a
//     two-GPU run is to check the model there again (scripts/gpu/two.sh).
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
	UpdateBW:    4009e9,
	NormBW:      3419e9,
	PerBucket:   0,
	PerCast:     5300 * time.Nanosecond,
	NormFixed:   147 * time.Microsecond,
	Sync:        215 * time.Microsecond,
	AmaxFixed:   90 * time.Microsecond,
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
	cluster("h200", 4009e9),
	cluster("h100", 4009e9*3.35/4.8),
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
// current scaling, BF16 gradients) that the model is checked against: the
// phases of one GPU from the eighth session (2026-12-01, one launch per
// phase), the collectives of two from 2026-11-30 (NCCL's bandwidth, which
// nothing since has changed). The two-GPU compute phases of that day were
// measured with the example's timing wrapper hiding the backend's optional
// interfaces (the statistics bucket by bucket, the scales through the host)
// and before the one-launch kernels; they are left out until two.sh
// measures them again.
var Measurements = []Measured{
	{NVLinkH200, 2, "reduce_scatter", ms(5.465), "BENCHMARKS.md, commit 6611a63", false},
	{NVLinkH200, 2, "all_gather", ms(2.639), "BENCHMARKS.md", false},
	{NVLinkH200, 1, "norm", ms(0.977), "scripts/gpu/NOTES.md, eighth session", true},
	{NVLinkH200, 1, "update", ms(9.556), "scripts/gpu/NOTES.md, eighth session", true},
	{NVLinkH200, 1, "amax_reduce", ms(0.090), "scripts/gpu/NOTES.md, eighth session", true},
	{NVLinkH200, 1, "cast", ms(1.887), "scripts/gpu/NOTES.md, eighth session", true},
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
