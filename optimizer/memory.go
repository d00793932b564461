package optimizer

import (
	"fmt"
	"slices"
	"strings"

	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer/backend"
	"github.com/distopt/distopt/shard"
)

// BufferBytes is the size of one kind of buffer a rank holds.
type BufferBytes struct {
	Name  string
	Bytes int64
	// Host is true for buffers kept in host memory whatever the backend
	// (the amax histories).
	Host bool
}

// MemoryReport lists every buffer one rank of the optimizer holds.
type MemoryReport struct {
	World   int
	Params  int64 // parameter elements of the model (no padding)
	Padding int64 // padding elements per bucket buffer, summed over buckets
	Buffers []BufferBytes
}

// Total is the sum of all buffers in the backend's memory (host-only
// buffers excluded).
func (m MemoryReport) Total() int64 {
	var t int64
	for _, b := range m.Buffers {
		if !b.Host {
			t += b.Bytes
		}
	}
	return t
}

// BytesPerParam is Total divided by the number of parameters.
func (m MemoryReport) BytesPerParam() float64 { return float64(m.Total()) / float64(m.Params) }

// Get returns the bytes of the named buffer (0 when absent).
func (m MemoryReport) Get(name string) int64 {
	for _, b := range m.Buffers {
		if b.Name == name {
			return b.Bytes
		}
	}
	return 0
}

// String formats the report as a table.
func (m MemoryReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-28s %14s\n", "buffer (per rank)", "bytes")
	for _, x := range m.Buffers {
		note := ""
		if x.Host {
			note = " (host)"
		}
		fmt.Fprintf(&b, "%-28s %14d%s\n", x.Name, x.Bytes, note)
	}
	fmt.Fprintf(&b, "%-28s %14d  = %.3f bytes/param over %d params (world %d, %d padding elements)\n", "total", m.Total(), m.BytesPerParam(), m.Params, m.World, m.Padding)
	return b.String()
}

// Buffer names of a MemoryReport.
const (
	BufFP8Params = "fp8 parameters"
	BufHPParams  = "high-precision parameters"
	BufGrads     = "gradients"
	// BufGradShard and BufGradPool replace BufGrads with sharded
	// gradients: the reduced gradient shard of every bucket, and the pool
	// of GradBuffers bucket-sized buffers the backward pass writes.
	BufGradShard   = "gradient shard"
	BufGradPool    = "gradient bucket buffers"
	BufMaster      = "fp32 master shard"
	BufMomentM     = "moment m shard" // "moment " + Rule.Moments()[0] + " shard"
	BufMomentV     = "moment v shard" // "moment " + Rule.Moments()[1] + " shard"
	BufBlockScales = "block scales"
	// BufMomentScales is the float32 scale of every block of FP8 moments
	// (the moment rows count their codes only).
	BufMomentScales = "moment block scales"
	BufScales       = "scales, amax, norm stats"
	BufHistory      = "amax histories"
)

// PredictMemory computes the memory report of one rank of an optimizer over
// params on world ranks with cfg, without allocating anything. It is exactly
// what New allocates (Report of a live optimizer returns the same numbers).
func PredictMemory(params []Param, world int, cfg Config) (MemoryReport, error) {
	cfg.setDefaults()
	if err := cfg.validate(params); err != nil {
		return MemoryReport{}, err
	}
	l, err := NewLayout(params, world, cfg.Layout)
	if err != nil {
		return MemoryReport{}, err
	}
	return memoryOf(l, params, &cfg), nil
}

// bucketBytes is the size of every buffer of one bucket on one rank, as
// New allocates them and the memory report counts them.
type bucketBytes struct {
	grad, master    int64
	moment          [2]int64 // each of the rule's moments, in Rule.Moments order, block scales included
	momentScales    [2]int64 // of which FP8 block scales
	fp8, hp, blocks int64    // data: fp8 (FP8 buckets) or hp; blocks: block scales
}

// bufferSizes returns the buffer sizes of bucket b under cfg.
func bufferSizes(b shard.Bucket, cfg *Config) bucketBytes {
	size, shardSize := int64(b.Size), int64(b.ShardSize)
	s := bucketBytes{
		grad:   size * int64(cfg.GradType.Size()),
		master: 4 * shardSize,
	}
	if cfg.ShardedGradients {
		s.grad = shardSize * int64(cfg.GradType.Size())
	}
	for i, t := range cfg.momentTypes() {
		s.moment[i] = int64(t.Bytes(b.ShardSize, cfg.MomentBlock))
		s.momentScales[i] = int64(t.ScaleBytes(b.ShardSize, cfg.MomentBlock))
	}
	if b.HighPrecision {
		s.hp = size * int64(cfg.HighPrecisionType.Size())
	} else {
		s.fp8 = int64(cfg.Recipe.DataBytes(b.Size))
		s.blocks = int64(cfg.Recipe.BlockScaleBytes(b.Size))
	}
	return s
}

func memoryOf(l *shard.Layout, params []Param, cfg *Config) MemoryReport {
	r := MemoryReport{World: l.World, Params: int64(l.TotalElements())}
	var sum bucketBytes
	for _, b := range l.Buckets {
		r.Padding += int64(b.Size - b.Used)
		s := bufferSizes(b, cfg)
		sum.grad += s.grad
		sum.master += s.master
		for i := range s.moment {
			sum.moment[i] += s.moment[i] - s.momentScales[i]
			sum.momentScales[i] += s.momentScales[i]
		}
		sum.fp8 += s.fp8
		sum.hp += s.hp
		sum.blocks += s.blocks
	}
	for _, b := range l.Buckets {
		prev := 0
		for _, i := range b.Params {
			r.Padding += int64(l.Places[i].Offset - prev)
			prev = l.Places[i].Offset + l.Places[i].Len
		}
	}
	slots := 0
	for _, p := range params {
		if !p.HighPrecision {
			slots += cfg.Recipe.AmaxSlots(p.Shape)
		}
	}
	r.Buffers = []BufferBytes{
		{Name: BufFP8Params, Bytes: sum.fp8},
		{Name: BufHPParams, Bytes: sum.hp},
		{Name: BufGrads, Bytes: sum.grad},
		{Name: BufMaster, Bytes: sum.master},
	}
	switch {
	case cfg.ExternalGradients: // lent by the caller each step
		r.Buffers = slices.Delete(r.Buffers, 2, 3)
	case cfg.ShardedGradients:
		r.Buffers[2] = BufferBytes{Name: BufGradShard, Bytes: sum.grad}
		r.Buffers = slices.Insert(r.Buffers, 3, BufferBytes{Name: BufGradPool, Bytes: int64(cfg.GradBuffers) * poolBufferBytes(l, cfg)})
	}
	for i, m := range cfg.Rule.Moments() {
		r.Buffers = append(r.Buffers, BufferBytes{Name: "moment " + m + " shard", Bytes: sum.moment[i]})
	}
	if cfg.hasFP8Moments() {
		r.Buffers = append(r.Buffers, BufferBytes{Name: BufMomentScales, Bytes: sum.momentScales[0] + sum.momentScales[1]})
	}
	if cfg.Recipe.LocalBlocks() {
		r.Buffers = append(r.Buffers, BufferBytes{Name: BufBlockScales, Bytes: sum.blocks})
	}
	r.Buffers = append(r.Buffers, BufferBytes{Name: BufScales, Bytes: int64(12*slots + 8*backend.StatsLen)})
	if cfg.Recipe.ScaleSource() == fp8.FromHistory {
		r.Buffers = append(r.Buffers, BufferBytes{Name: BufHistory, Bytes: int64(4 * slots * cfg.Recipe.History()), Host: true})
	}
	return r
}

// Report returns the memory report of this rank.
func (o *Optimizer) Report() MemoryReport { return memoryOf(o.layout, o.params, &o.cfg) }

// poolBufferBytes is the size of one buffer of the sharded gradients' pool:
// the gradient of the largest bucket.
func poolBufferBytes(l *shard.Layout, cfg *Config) int64 {
	var n int64
	for _, b := range l.Buckets {
		n = max(n, int64(b.Size))
	}
	return n * int64(cfg.GradType.Size())
}
