package kernels

import (
	"encoding/binary"
	"fmt"

	"github.com/distopt/distopt/internal/cuda"
)

// gradStatsBlock is the block size gradstats.cu is written for (GS_BLOCK).
const gradStatsBlock = 256

// gsConfig is a configuration of the statistics kernels of gradstats.cu:
// the suffix of their names, the 16-byte vectors each thread loads per
// iteration (U), and the resident blocks per multiprocessor the kernels are
// built for (__launch_bounds__): the grid is one wave of them.
type gsConfig struct {
	suffix      string
	vectors     int
	blocksPerSM int
}

// gradStatsConfigs are every configuration gradstats.cu builds (GS_KERNELS);
// the tests check each one and the benchmark times each one. Only the one
// launched is built (the PTX of each costs start-up time); the others
// measured were u4 (4 vectors per iteration, the first bfloat16 window
// policy), u2p (2 vectors, the next iteration's loads issued first) and
// u2r (2 vectors, prefetched, repositioned).
var gradStatsConfigs = []gsConfig{
	{"_u4r", 4, 4}, // 4 vectors, prefetched, the bfloat16 window 4 exponents lower and repositioned
}

// gradStatsConfig is the configuration GradStats and GradStatsTable launch:
// u4r, the fastest on the 709M bfloat16 gradients of the 1.42B GPT's shard
// at d = 2 in one table launch (one H200: 0.521 ms, 69% of copy, against
// 0.535-0.681 for the others, u4 0.681; 2^28 typical bfloat16: u4r 0.233
// ms, u2p 0.226, u4 0.274; float32: 93.6% of copy). Its bits are checked
// on a GPU by TestGradStats* (and by the optimizer/gpu conformance suite
// against the CPU backend).
var gradStatsConfig = gradStatsConfigs[0]

// GradStats queues on s the addition of the statistics of optimizer.AddSquare
// over the n elements of grad (bfloat16 when bf16, else float32; grad need
// only be aligned to its element) into the ten int64 of stats, followed by
// optimizer.Normalize of stats. The result is the exact sum whatever the
// grid (see gradstats.cu for the scheme and its proof).
func (k *Set) GradStats(s *cuda.Stream, stats, grad cuda.DevicePtr, n int, bf16 bool) error {
	return k.gradStatsWith(gradStatsConfig, s, stats, grad, n, bf16)
}

// gradStatsWith is GradStats with the kernels of configuration c.
func (k *Set) gradStatsWith(c gsConfig, s *cuda.Stream, stats, grad cuda.DevicePtr, n int, bf16 bool) error {
	if checkLen("GradStats", n) {
		args := new(cuda.Args).Ptr(stats).Ptr(grad).U64(uint64(n))
		if err := s.Launch(k.function("grad_stats_"+typeName(bf16)+c.suffix), k.gradStatsGrid(c, n, bf16), cuda.Dim3{X: gradStatsBlock}, 0, args); err != nil {
			return err
		}
	}
	return k.gradStatsNormalize(s, stats)
}

// gradStatsGrid is the grid for n elements: one wave of resident blocks at
// most, fewer when there are not enough vectors for every thread.
func (k *Set) gradStatsGrid(c gsConfig, n int, bf16 bool) cuda.Dim3 {
	perVector := 4
	if bf16 {
		perVector = 8
	}
	units := (n + perVector*c.vectors - 1) / (perVector * c.vectors)
	return cuda.Dim3{X: uint32(max(1, min((units+gradStatsBlock-1)/gradStatsBlock, c.blocksPerSM*max(k.sms, 1))))}
}

// gradStatsNormalize queues optimizer.Normalize of stats.
func (k *Set) gradStatsNormalize(s *cuda.Stream, stats cuda.DevicePtr) error {
	return s.Launch(k.function("grad_stats_normalize"), cuda.Dim3{X: 1}, cuda.Dim3{X: 1}, 0, new(cuda.Args).Ptr(stats))
}

// GradSegment is a gradient of N elements at Ptr.
type GradSegment struct {
	Ptr cuda.DevicePtr
	N   int
}

// GradStatsTable is a device table of gradient segments of one element
// type, made once, whose statistics Launch adds in one kernel launch (no
// work per segment on the host).
type GradStatsTable struct {
	k     *Set
	dev   cuda.DevicePtr // GSSeg x nseg; 0 when empty
	nseg  int
	elems int
	bf16  bool
	c     gsConfig
}

// gsSegBytes is the size of a GSSeg of gradstats.cu.
const gsSegBytes = 16

// NewGradStatsTable uploads the table of segs (bfloat16 elements when
// bf16, else float32) through s. Each segment must be aligned to its
// element and N must not be negative; segments of no element are left out.
// The caller frees the table with Free, after the last Launch has run.
func (k *Set) NewGradStatsTable(s *cuda.Stream, segs []GradSegment, bf16 bool) (*GradStatsTable, error) {
	return k.newGradStatsTable(gradStatsConfig, s, segs, bf16)
}

// newGradStatsTable is NewGradStatsTable launching configuration c.
func (k *Set) newGradStatsTable(c gsConfig, s *cuda.Stream, segs []GradSegment, bf16 bool) (*GradStatsTable, error) {
	size := 4
	if bf16 {
		size = 2
	}
	t := &GradStatsTable{k: k, bf16: bf16, c: c}
	var raw []byte
	for i, sg := range segs {
		switch {
		case sg.N < 0:
			return nil, fmt.Errorf("kernels: gradient segment %d of %d elements", i, sg.N)
		case sg.N > 0 && uint64(sg.Ptr)%uint64(size) != 0:
			return nil, fmt.Errorf("kernels: gradient segment %d at %#x is not aligned to its %d-byte elements", i, uint64(sg.Ptr), size)
		case sg.N == 0:
			continue
		}
		raw = binary.LittleEndian.AppendUint64(raw, uint64(sg.Ptr))
		raw = binary.LittleEndian.AppendUint64(raw, uint64(sg.N))
		t.nseg++
		t.elems += sg.N
	}
	if t.nseg == 0 {
		return t, nil
	}
	p, err := k.d.Alloc(len(raw))
	if err != nil {
		return nil, fmt.Errorf("kernels: gradient statistics table: %w", err)
	}
	if err := s.Upload(p, raw); err != nil {
		k.d.Free(p)
		return nil, fmt.Errorf("kernels: gradient statistics table: %w", err)
	}
	t.dev = p
	return t, nil
}

// Segments returns the number of segments in the table (those of at least
// one element).
func (t *GradStatsTable) Segments() int { return t.nseg }

// Launch queues on s the addition of the statistics of every segment of the
// table into stats, in one launch, then optimizer.Normalize of stats: the
// same bits as GradStats over each segment in turn.
func (t *GradStatsTable) Launch(s *cuda.Stream, stats cuda.DevicePtr) error {
	if t.nseg > 0 {
		args := new(cuda.Args).Ptr(stats).Ptr(t.dev).I32(int32(t.nseg))
		if err := s.Launch(t.k.function("grad_stats_table_"+typeName(t.bf16)+t.c.suffix), t.k.gradStatsGrid(t.c, t.elems, t.bf16), cuda.Dim3{X: gradStatsBlock}, 0, args); err != nil {
			return err
		}
	}
	return t.k.gradStatsNormalize(s, stats)
}

// Free releases the device table. The table must not be launched again.
func (t *GradStatsTable) Free() error {
	if t.dev == 0 {
		return nil
	}
	p := t.dev
	t.dev, t.nseg = 0, 0
	return t.k.d.Free(p)
}
