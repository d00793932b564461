package gpu

import (
	"github.com/distopt/distopt/internal/kernels"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/backend"
)

// UpdateShards implements optimizer.ShardUpdater: one launch over the
// segments of every shard (kernels.PackShards), each chunk reading and
// writing its own shard's buffers; the launch's scalars, flags, Amax,
// Scale and Control are the first shard's, which every other shard shares
// (optimizer.CheckShards).
func (b *Backend) UpdateShards(as []*backend.UpdateArgs) error {
	if err := optimizer.CheckShards(as); err != nil {
		return err
	}
	segs := make([][]kernels.Segment, len(as))
	shards := make([]kernels.Shard, len(as))
	for i, a := range as {
		segs[i] = kernelSegments(a.Rule, a.Segments, nil)
		sh := kernels.Shard{Master: b.ptr(a.Master), Out: b.ptr(a.FP8), BlockScales: b.ptr(a.BlockScales)}
		if a.HP != nil {
			sh.Out = b.ptr(a.HP)
		}
		if a.Rule != optimizer.RuleNone {
			sh.M, sh.V, sh.Grad = b.ptr(a.M), b.ptr(a.V), b.ptr(a.Grad)
			sh.MScales, sh.VScales = b.ptr(a.MScales), b.ptr(a.VScales)
			sh.MomentBase, sh.MomentSeed = uint64(a.MomentBase), a.MomentSeed
		}
		shards[i] = sh
	}
	t, err := kernels.PackShards(segs, shards)
	if err != nil {
		return err
	}
	return b.onWorker(func() error {
		l, err := b.updateLaunch(as[0], t)
		if err != nil {
			return err
		}
		for _, a := range as { // the copy's type: any shard that has one
			if a.HP != nil && a.HPType != 0 {
				l.HPBF16 = isBF16(a.HPType)
			}
		}
		return b.ks.Update(b.s, l)
	})
}

// CastShards implements optimizer.ShardUpdater: one launch over the
// segments of modes ModeTensorCurrent and ModeTile of every shard.
func (b *Backend) CastShards(cs []*backend.CastArgs) error {
	if err := optimizer.CheckCastShards(cs); err != nil {
		return err
	}
	segs := make([][]kernels.Segment, len(cs))
	shards := make([]kernels.Shard, len(cs))
	for i, c := range cs {
		segs[i] = kernelSegments(optimizer.RuleNone, c.Segments, castModes)
		shards[i] = kernels.Shard{Master: b.ptr(c.Master), Out: b.ptr(c.FP8)}
	}
	t, err := kernels.PackShards(segs, shards)
	if err != nil {
		return err
	}
	c := cs[0]
	return b.onWorker(func() error {
		tp, err := b.table('C', t)
		if err != nil {
			return err
		}
		return b.ks.CastSegments(b.s, 0, 0, t, tp, b.ptr(c.Scale), c.Format, b.ptr(c.Control))
	})
}

var _ optimizer.ShardUpdater = (*Backend)(nil)
