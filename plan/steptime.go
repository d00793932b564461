package plan

import (
	"fmt"
	"math"
	"time"

	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
)

// This file is the step-time model: the time of each phase of an optimizer
// step from the bytes it moves, collectives in an alpha-beta model.

// Link is a network path between GPUs in the alpha-beta model: a message
// of n bytes over one step of a ring costs Alpha + n/BusBW.
type Link struct {
	Name  string
	BusBW float64       // bytes per second per GPU, the "busbw" of nccl-tests
	Alpha time.Duration // latency of one step (one hop of a ring, one level of a tree)
}

// Machine is a cluster: nodes of GPUsPerNode GPUs, NVLink (or another
// fabric) inside a node, a network between nodes, and what the update's
// kernels reach on one GPU.
type Machine struct {
	Name        string
	GPUsPerNode int
	Intra       Link // between the GPUs of one node
	Inter       Link // between nodes (per GPU: one NIC per GPU, rail-optimized)
	// UpdateBW is the bandwidth the fused update and the cast reach
	// (bytes moved per second), NormBW that of the gradient-norm kernel
	// (gradient bytes read per second; it is compute-bound).
	UpdateBW, NormBW float64
	// PerBucket is the cost of waiting for one bucket's kernels in turn
	// (launch and wait), in the update and the cast; PerCast the same
	// for the cast. NormFixed is the norm's fixed cost (per-bucket
	// launches, the host's read of the statistics). Sync is the cost of
	// one waited collective beyond its alpha-beta time (enqueue, wait,
	// host round trip).
	PerBucket, PerCast, NormFixed, Sync time.Duration
	// AmaxFixed is the amax phase's cost without a collective (the
	// scales derived and read back; measured at d = 1).
	AmaxFixed time.Duration
	// PeakFLOPs is the dense BF16 peak of one GPU (FLOP/s), for the
	// compute time of a step.
	PeakFLOPs float64
}

// StepShape is what the model needs of a model and its configuration.
type StepShape struct {
	Params, HighPrecision int64 // parameters; of which gathered in high precision
	Buckets               int
	GradBytes             int   // bytes per gradient element (BF16: 2)
	HPBytes               int   // bytes per gathered high-precision element (BF16: 2)
	UpdateBytes           int   // bytes per element moved by the update (AdamW, FP32 state, with the amax: 27)
	CastBytes             int   // bytes per element moved by a separate cast pass (current and tile scaling: 5), 0 when fused
	AmaxBytes             int64 // bytes of the packed amax all-reduce
}

// Phases are the predicted times of the phases of one step, as
// examples/multigpu measures them (each phase's work waited for).
type Phases struct {
	ReduceScatter, Norm, Update, AmaxReduce, Cast, AllGather time.Duration
}

// Comm is the time of the phases that communicate gradients and
// parameters.
func (p Phases) Comm() time.Duration { return p.ReduceScatter + p.AllGather }

// Total is the sum of the phases.
func (p Phases) Total() time.Duration {
	return p.ReduceScatter + p.Norm + p.Update + p.AmaxReduce + p.Cast + p.AllGather
}

// Exposed is the time a step adds to compute, the time of forward and
// backward, when the reduce-scatter overlaps the backward pass (two thirds
// of compute) and the all-gather the forward pass (one third): what each
// collective does not hide, plus the phases that cannot overlap (norm,
// update, amax, cast).
func (p Phases) Exposed(compute time.Duration) time.Duration {
	rs := max(0, p.ReduceScatter-2*compute/3)
	ag := max(0, p.AllGather-compute/3)
	return rs + ag + p.Norm + p.Update + p.AmaxReduce + p.Cast
}

// seconds converts s seconds to a Duration.
func seconds(s float64) time.Duration { return time.Duration(math.Round(s * 1e9)) }

// RingStep is the time of a ring reduce-scatter or all-gather of a buffer
// of n bytes (the full buffer, Size x the shard) over p ranks:
// (p-1) alpha + (p-1)/p n / busbw. Zero for p = 1.
func RingStep(l Link, p int, n float64) time.Duration {
	if p <= 1 {
		return 0
	}
	return time.Duration(p-1)*l.Alpha + seconds(float64(p-1)/float64(p)*n/l.BusBW)
}

// RingAllReduce is a ring all-reduce of n bytes over p ranks: a
// reduce-scatter then an all-gather, 2 RingStep.
func RingAllReduce(l Link, p int, n float64) time.Duration { return 2 * RingStep(l, p, n) }

// TreeAllReduce is a pipelined (double binary) tree all-reduce of n bytes
// over p ranks: 2 ceil(log2 p) alpha (up the tree and down again) plus the
// bandwidth term of the ring, 2 (p-1)/p n / busbw (busbw is defined so
// that both algorithms move data at it).
func TreeAllReduce(l Link, p int, n float64) time.Duration {
	if p <= 1 {
		return 0
	}
	levels := math.Ceil(math.Log2(float64(p)))
	return time.Duration(2*levels)*l.Alpha + seconds(2*float64(p-1)/float64(p)*n/l.BusBW)
}

// AllReduce is the faster of the ring and the tree, as NCCL's tuner picks.
// In this model the tree is never slower (its latency grows with log p,
// the ring's with p); NCCL prefers rings for large messages inside a node,
// where its trees reach less bandwidth, a difference the model leaves out.
func AllReduce(l Link, p int, n float64) time.Duration {
	return min(RingAllReduce(l, p, n), TreeAllReduce(l, p, n))
}

// link is the path of a collective over p ranks, consecutive ranks on
// the same node: NVLink inside one node, the network beyond.
func (m Machine) link(p int) Link {
	if p <= m.GPUsPerNode {
		return m.Intra
	}
	return m.Inter
}

// PredictStep predicts the phases of a step of shape s on d ranks of m,
// with the state sharded within groups of g ranks (collective/hier) and
// replicated across d/g groups; g = d (or 0) is flat sharding. Groups are
// consecutive ranks, so a group of at most GPUsPerNode ranks lies in one
// node.
func PredictStep(m Machine, s StepShape, d, g int) (Phases, error) {
	if g == 0 {
		g = d
	}
	if d < 1 || g < 1 || d%g != 0 {
		return Phases{}, fmt.Errorf("plan: %d ranks do not form groups of %d", d, g)
	}
	if m.Intra.BusBW <= 0 || m.Inter.BusBW <= 0 || m.UpdateBW <= 0 || m.NormBW <= 0 {
		return Phases{}, fmt.Errorf("plan: machine %q lacks a bandwidth", m.Name)
	}
	n := float64(s.Params)
	shard := n / float64(g)
	grads := n * float64(s.GradBytes)
	gathered := float64(s.Params-s.HighPrecision) + float64(s.HighPrecision*int64(s.HPBytes))
	sync := func(p int) time.Duration {
		if p <= 1 {
			return 0
		}
		return m.Sync
	}
	var ph Phases
	in := m.link(g)
	ph.ReduceScatter = RingStep(in, g, grads) + sync(g)
	if groups := d / g; groups > 1 {
		ph.ReduceScatter += AllReduce(m.link(d), groups, grads/float64(g)) + m.Sync
	}
	ph.AllGather = RingStep(in, g, gathered) + sync(g)
	small := func(bytes float64) time.Duration { return AllReduce(in, g, bytes) + m.Sync }
	ph.Norm = seconds(shard*float64(s.GradBytes)/m.NormBW) + m.NormFixed
	if g > 1 {
		ph.Norm += small(8 * 16) // the statistics: a few int64 limbs
	}
	ph.AmaxReduce = m.AmaxFixed
	if g > 1 {
		ph.AmaxReduce += small(float64(s.AmaxBytes))
	}
	ph.Update = seconds(shard*float64(s.UpdateBytes)/m.UpdateBW) + time.Duration(s.Buckets)*m.PerBucket + sync(g)
	if s.CastBytes > 0 {
		ph.Cast = seconds(shard*float64(s.CastBytes)/m.UpdateBW) + time.Duration(s.Buckets)*m.PerCast + sync(g)
	}
	return ph, nil
}

// ComputeTime is the time of forward and backward of a step of tokens
// tokens per GPU: 6 x params x tokens FLOPs at mfu of the peak.
func (m Machine) ComputeTime(params int64, tokens int, mfu float64) time.Duration {
	return seconds(6 * float64(params) * float64(tokens) / (m.PeakFLOPs * mfu))
}

// ShapeOf is the step shape of params in buckets buckets with AdamW, FP32
// master and moments, BF16 gradients and high-precision copies, and the
// recipe's passes: current and tile scaling cast in a second pass (5 bytes
// per element: the master read, the byte written); delayed, block and MX
// scaling cast inside the update. The amax all-reduce carries one float32
// per tensor.
func ShapeOf(params []optimizer.Param, buckets int, scaling fp8.Scaling) StepShape {
	s := StepShape{Buckets: buckets, GradBytes: 2, HPBytes: 2, UpdateBytes: 27}
	for _, p := range params {
		n := int64(1)
		for _, d := range p.Shape {
			n *= int64(d)
		}
		s.Params += n
		if p.HighPrecision {
			s.HighPrecision += n
		} else {
			s.AmaxBytes += 4
		}
	}
	if scaling == fp8.TensorCurrent || scaling == fp8.Block128x128 {
		s.CastBytes = 5
	}
	return s
}
