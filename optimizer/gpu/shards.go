package gpu

import (
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/internal/cuda"
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
	t, err := shardTable(as, b.ptr)
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

// shardTable packs the table of UpdateShards' launch over as, ptr giving
// each buffer's device address. A shard's moment seed is packed only where
// the kernels read it (readsSeed): it changes every step
// (backend.MomentSeed), and a table whose bytes differ from its device
// copy's is copied again (Backend.table), so a seed nothing reads would
// cost an upload every step.
func shardTable(as []*backend.UpdateArgs, ptr func(collective.Buffer) cuda.DevicePtr) (kernels.Table, error) {
	seed := readsSeed(as[0]) // the launch's moment types, every shard's (CheckShards)
	segs := make([][]kernels.Segment, len(as))
	shards := make([]kernels.Shard, len(as))
	n := 0
	for _, a := range as {
		n += len(a.Segments)
	}
	all := make([]kernels.Segment, 0, n) // one allocation for every shard's segments
	for i, a := range as {
		start := len(all)
		all = appendKernelSegments(all, a.Rule, a.Segments, nil)
		segs[i] = all[start:len(all):len(all)]
		sh := kernels.Shard{Master: ptr(a.Master), Out: ptr(a.FP8), BlockScales: ptr(a.BlockScales)}
		if a.HP != nil {
			sh.Out = ptr(a.HP)
		}
		if a.Rule != optimizer.RuleNone {
			sh.M, sh.V, sh.Grad = ptr(a.M), ptr(a.V), ptr(a.Grad)
			sh.MScales, sh.VScales = ptr(a.MScales), ptr(a.VScales)
			sh.MomentBase = uint64(a.MomentBase)
			if seed {
				sh.MomentSeed = a.MomentSeed
			}
		}
		shards[i] = sh
	}
	return kernels.PackShards(segs, shards)
}

// readsSeed reports whether the update kernels read a's MomentSeed: only
// to round an FP8 second moment stochastically (moments.cuh's mom_store,
// which dithers v alone), so under AdamW with V stored as FP8.
func readsSeed(a *backend.UpdateArgs) bool {
	_, vt := a.MomentTypes()
	return a.Rule == optimizer.RuleAdamW && vt == backend.MomentFP8
}

// CastShards implements optimizer.ShardUpdater: one launch over the
// segments of modes ModeTensorCurrent and ModeTile of every shard.
func (b *Backend) CastShards(cs []*backend.CastArgs) error {
	if err := optimizer.CheckCastShards(cs); err != nil {
		return err
	}
	segs := make([][]kernels.Segment, len(cs))
	shards := make([]kernels.Shard, len(cs))
	n := 0
	for _, c := range cs {
		n += len(c.Segments)
	}
	all := make([]kernels.Segment, 0, n)
	for i, c := range cs {
		start := len(all)
		all = appendKernelSegments(all, optimizer.RuleNone, c.Segments, castModes)
		segs[i] = all[start:len(all):len(all)]
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
