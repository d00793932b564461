package kernels

import "github.com/distopt/distopt/internal/cuda"

// gradStatsBlock is the block size gradstats.cu is written for (GS_BLOCK),
// and gradStatsVectors the 16-byte vectors each thread loads per iteration
// (GSTraits::U).
const (
	gradStatsBlock   = 256
	gradStatsVectors = 4
)

// gradStatsBlocksPerSM is the occupancy the kernels are built for
// (__launch_bounds__(256, 4)): one wave of resident blocks.
const gradStatsBlocksPerSM = 4

// GradStats queues on s the addition of the statistics of optimizer.AddSquare
// over the n elements of grad (bfloat16 when bf16, else float32; grad need
// only be aligned to its element) into the ten int64 of stats, followed by
// optimizer.Normalize of stats. The result is the exact sum whatever the
// grid (see gradstats.cu for the scheme and its proof).
func (k *Set) GradStats(s *cuda.Stream, stats, grad cuda.DevicePtr, n int, bf16 bool) error {
	if checkLen("GradStats", n) {
		perVector := 4
		if bf16 {
			perVector = 8
		}
		units := (n + perVector*gradStatsVectors - 1) / (perVector * gradStatsVectors)
		blocks := min((units+gradStatsBlock-1)/gradStatsBlock, gradStatsBlocksPerSM*max(k.sms, 1))
		args := new(cuda.Args).Ptr(stats).Ptr(grad).U64(uint64(n))
		if err := s.Launch(k.function("grad_stats_"+typeName(bf16)), cuda.Dim3{X: uint32(blocks)}, cuda.Dim3{X: gradStatsBlock}, 0, args); err != nil {
			return err
		}
	}
	return k.gradStatsNormalize(s, stats)
}

// gradStatsNormalize queues optimizer.Normalize of stats.
func (k *Set) gradStatsNormalize(s *cuda.Stream, stats cuda.DevicePtr) error {
	return s.Launch(k.function("grad_stats_normalize"), cuda.Dim3{X: 1}, cuda.Dim3{X: 1}, 0, new(cuda.Args).Ptr(stats))
}
