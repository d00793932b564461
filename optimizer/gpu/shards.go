package gpu

import (
	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/kernels"
	"github.com/distopt/distopt/optimizer/backend"
)

// UpdateShards implements backend.ShardUpdater: one launch over the
// segments of every shard (kernels.PackShards), each chunk reading and
// writing its own shard's buffers; the launch's scalars, flags, Amax,
// Scale and Control are the first shard's, which every other shard shares
// (backend.CheckShards).
func (b *Backend) UpdateShards(as []*backend.UpdateArgs) error {
	if err := backend.CheckShards(as); err != nil {
		return err
	}
	t, err := shardTable(as, b.ptr)
	if err != nil {
		return err
	}
	return b.onWorker(func() error {
		tp, err := b.table('U', t)
		if err != nil {
			return err
		}
		l := b.updateLaunch(as[0], t, tp)
		setHP(l, as)
		return b.ks.Update(b.s, l)
	})
}

// setHP sets the type of the high-precision copies of l, a launch over the
// shards as: any shard's that has one (CheckShards: they agree).
func setHP(l *kernels.UpdateLaunch, as []*backend.UpdateArgs) {
	for _, a := range as {
		if a.HP != nil && a.HPType != 0 {
			l.HPBF16 = isBF16(a.HPType)
		}
	}
}

// shardTable packs the table of UpdateShards' launch over as, ptr giving
// each buffer's device address. A shard's moment seed is packed only where
// the kernels read it (readsSeed): it changes every step
// (backend.MomentSeed), and a table whose bytes differ from its device
// copy's is copied again (Backend.table), so a seed nothing reads would
// cost an upload every step.
func shardTable(as []*backend.UpdateArgs, ptr func(buffer.Buffer) cuda.DevicePtr) (kernels.Table, error) {
	seed := readsSeed(as[0]) // the launch's moment types, every shard's (CheckShards)
	lists := make([][]backend.Segment, len(as))
	for i, a := range as {
		lists[i] = a.Segments
	}
	segs := shardSegments(as[0].Rule, lists, nil) // one rule for all (CheckShards)
	shards := make([]kernels.Shard, len(as))
	for i, a := range as {
		sh := kernels.Shard{Master: ptr(a.Master), Out: ptr(a.FP8), BlockScales: ptr(a.BlockScales)}
		if a.HP != nil {
			sh.Out = ptr(a.HP)
		}
		if a.Rule != backend.RuleNone {
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
	return a.Rule == backend.RuleAdamW && vt == backend.MomentFP8
}

// CastShards implements backend.ShardUpdater: one launch over the
// segments of modes ModeTensorCurrent and ModeTile of every shard.
func (b *Backend) CastShards(cs []*backend.CastArgs) error {
	if err := backend.CheckCastShards(cs); err != nil {
		return err
	}
	t, err := castTable(cs, b.ptr)
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

// castTable packs the table of CastShards' launch over cs, ptr giving
// each buffer's device address.
func castTable(cs []*backend.CastArgs, ptr func(buffer.Buffer) cuda.DevicePtr) (kernels.Table, error) {
	lists := make([][]backend.Segment, len(cs))
	shards := make([]kernels.Shard, len(cs))
	for i, c := range cs {
		lists[i] = c.Segments
		shards[i] = kernels.Shard{Master: ptr(c.Master), Out: ptr(c.FP8)}
	}
	return kernels.PackShards(shardSegments(backend.RuleNone, lists, castModes), shards)
}

var _ backend.ShardUpdater = (*Backend)(nil)

// shardSegments returns kernelSegments(r, lists[i], keep) for every shard
// i, all in one allocation (a step packs its tables every time).
func shardSegments(r backend.Rule, lists [][]backend.Segment, keep func(backend.Mode) bool) [][]kernels.Segment {
	n := 0
	for _, l := range lists {
		n += len(l)
	}
	all := make([]kernels.Segment, 0, n)
	out := make([][]kernels.Segment, len(lists))
	for i, l := range lists {
		start := len(all)
		all = appendKernelSegments(all, r, l, keep)
		out[i] = all[start:len(all):len(all)]
	}
	return out
}
