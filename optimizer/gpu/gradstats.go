package gpu

import (
	"fmt"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/internal/kernels"
	"github.com/distopt/distopt/optimizer/backend"
)

// statsPlan is the statistics pass over fixed gradient buffers: one device
// table of (pointer, count) uploaded when it is made, one launch (and the
// normalisation) per Run.
type statsPlan struct {
	b     *Backend
	stats buffer.Buffer
	table *kernels.GradStatsTable
}

// PlanGradStats implements backend.GradStatsPlanner: Run queues one
// kernel over every buffer (kernels.GradStatsTable) and the normalisation
// of stats, whatever the number of buffers; the bits are those of
// GradStats over each buffer in turn (the sum is exact).
func (b *Backend) PlanGradStats(stats buffer.Buffer, grads []buffer.Buffer, gt buffer.DType, ns []int) (backend.GradStatsPlan, error) {
	if len(grads) != len(ns) {
		return nil, fmt.Errorf("gpu: %d gradient buffers and %d counts", len(grads), len(ns))
	}
	segs := make([]kernels.GradSegment, len(grads))
	for i, g := range grads {
		if ns[i] > 0 {
			checkRange("PlanGradStats", b.dbuf(g), 0, ns[i]*gt.Size())
		}
		segs[i] = kernels.GradSegment{Ptr: b.ptr(g), N: ns[i]}
	}
	checkRange("PlanGradStats", b.dbuf(stats), 0, 8*backend.StatsLen)
	t, err := b.ks.NewGradStatsTable(b.s, segs, isBF16(gt))
	if err != nil {
		return nil, fmt.Errorf("gpu: %w", err)
	}
	return &statsPlan{b: b, stats: stats, table: t}, nil
}

// Run implements backend.GradStatsPlan (queued on the backend's stream).
// One hand-over to the device's worker for both launches.
func (p *statsPlan) Run() error {
	return p.b.dev.Do(func() error { return p.table.Launch(p.b.s, p.b.ptr(p.stats)) })
}

// Close implements backend.GradStatsPlan: it waits for the stream, then
// frees the table.
func (p *statsPlan) Close() error {
	if err := p.b.s.Synchronize(); err != nil {
		return fmt.Errorf("gpu: %w", err)
	}
	return p.table.Free()
}
