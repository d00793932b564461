package optimizer

import (
	"context"
	"fmt"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer/backend"
	"github.com/distopt/distopt/shard"
)

// New makes rank comm.Rank() of a distributed optimizer over params, with
// buffers on be, masters set from init, and the FP8 (and high-precision)
// parameters cast and gathered before it returns. All ranks must call New
// with the same parameters and configuration; a difference is reported as
// ErrMismatch naming what differs.
func New(ctx context.Context, comm collective.Communicator, be backend.Backend, params []Param, init InitFunc, cfg Config) (*Optimizer, error) {
	switch {
	case comm == nil:
		return nil, fmt.Errorf("optimizer: New needs a communicator, got nil: %w", ErrConfig)
	case be == nil:
		return nil, fmt.Errorf("optimizer: New needs a backend, got nil (cpu.New makes one): %w", ErrConfig)
	}
	if cfg.LossScaler != nil {
		ls := *cfg.LossScaler // the optimizer's own: ranks may share the value passed
		cfg.LossScaler = &ls
	}
	if err := checkPlacement(comm, be); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	if err := cfg.validate(params); err != nil {
		return nil, err
	}
	layout, err := NewLayout(params, comm.Size(), cfg.Layout)
	if err != nil {
		return nil, err
	}
	o := &Optimizer{cfg: cfg, comm: comm, backend: be, layout: layout, params: append([]Param(nil), params...), rank: comm.Rank()}
	if err := checkPoolBackend(&cfg, be); err != nil {
		return nil, err
	}
	if err := o.checkAgreement(ctx); err != nil {
		return nil, err
	}
	if err := o.allocate(); err != nil {
		o.Close()
		return nil, err
	}
	o.pipe = o.newPipeline()
	if err := o.agree(ctx, o.loadMasters(init)); err != nil {
		o.Close()
		return nil, err
	}
	if err := o.refresh(ctx, castFirst); err != nil {
		o.Close()
		return nil, err
	}
	o.logFallbacks()
	return o, nil
}

// checkPlacement refuses a communicator and a backend that do not share
// their memory: another memory kind, or (both bound to a GPU) another GPU.
func checkPlacement(comm collective.Communicator, be backend.Backend) error {
	if comm.Memory() != be.Memory() {
		return fmt.Errorf("optimizer: communicator takes %s memory but backend %s allocates %s memory: %w", comm.Memory(), be.Name(), be.Memory(), ErrConfig)
	}
	cd, ok1 := comm.(backend.OnDevice)
	bd, ok2 := be.(backend.OnDevice)
	if ok1 && ok2 && cd.Ordinal() != bd.Ordinal() {
		return fmt.Errorf("optimizer: communicator on GPU %d but backend %s on GPU %d: %w", cd.Ordinal(), be.Name(), bd.Ordinal(), ErrConfig)
	}
	return nil
}

// recipeMode is the Mode of the FP8 segments under recipe r.
func recipeMode(r fp8.Recipe) backend.Mode {
	switch rows, _ := r.Block(); {
	case r.ScaleSource() == fp8.FromHistory:
		return backend.ModeTensorDelayed
	case r.ScaleSource() == fp8.FromBlock:
		return backend.ModeBlock
	case rows > 1:
		return backend.ModeTile
	}
	return backend.ModeTensorCurrent
}

// allocate makes the optimizer's buffers: the scale slots, the statistics
// and every bucket's; then the plans over them.
func (o *Optimizer) allocate() error {
	r := o.cfg.Recipe
	o.slotOf = make([]int, len(o.params))
	for i, p := range o.params {
		o.slotOf[i] = -1
		if n := r.AmaxSlots(p.Shape); n > 0 && !p.HighPrecision {
			o.slotOf[i] = o.nSlots
			o.nSlots += n
		}
	}
	o.scales = newScaleState(r, o.nSlots)
	var err error
	if o.nSlots > 0 {
		for _, b := range []*buffer.Buffer{&o.amax, &o.scale, &o.scaleIn} {
			if *b, err = o.backend.Alloc(4 * o.nSlots); err != nil {
				return err
			}
		}
	}
	if o.stats, err = o.backend.Alloc(8 * backend.StatsLen); err != nil {
		return err
	}
	if err := o.initControl(); err != nil {
		return err
	}
	if err := o.initDelayed(); err != nil {
		return err
	}
	for bi, b := range o.layout.Buckets {
		bk, err := o.allocBucket(bi, b)
		o.buckets = append(o.buckets, bk) // freed by Close, even half-made
		if err != nil {
			return err
		}
	}
	if err := o.allocPool(); err != nil {
		return err
	}
	if err := o.planGradStats(); err != nil {
		return err
	}
	return o.planSteps()
}

// allocBucket makes the buffers and the segment table of bucket bi.
func (o *Optimizer) allocBucket(bi int, b shard.Bucket) (*bucket, error) {
	r := o.cfg.Recipe
	bk := &bucket{idx: bi, b: b}
	bk.lo, bk.hi = o.layout.ShardRange(bi, o.rank)
	bk.pieces = o.layout.Pieces(bi, o.rank)
	sizes := bufferSizes(b, &o.cfg)
	for _, x := range []struct {
		dst *buffer.Buffer
		n   int64
		use bool
	}{
		{&bk.grad, sizes.grad, !o.cfg.ShardedGradients && !o.cfg.ExternalGradients},
		{&bk.acc, sizes.grad, o.cfg.ShardedGradients},
		{&bk.master, sizes.master, true},
		{&bk.m, sizes.moment[0], true},
		{&bk.v, sizes.moment[1], len(o.cfg.Rule.Moments()) > 1},
		{&bk.data, sizes.fp8 + sizes.hp, true},
		{&bk.blocks, sizes.blocks, !b.HighPrecision && r.LocalBlocks()},
	} {
		if !x.use {
			continue
		}
		var err error
		if *x.dst, err = o.backend.Alloc(int(x.n)); err != nil {
			return bk, err
		}
	}
	mode := recipeMode(r)
	for _, pc := range bk.pieces {
		p := o.params[pc.Param]
		s := backend.Segment{Off: pc.ShardOffset, Len: pc.Len, Mode: mode, Slot: o.slotOf[pc.Param]}
		if p.HighPrecision {
			s.Mode = backend.ModeHighPrecision
		}
		if s.Mode == backend.ModeTile {
			_, s.Cols = fp8.Matrix(p.Shape)
			s.ParamOffset = pc.ParamOffset
		}
		bk.segs = append(bk.segs, s)
	}
	return bk, nil
}

// loadMasters sets the master shards from init.
func (o *Optimizer) loadMasters(init InitFunc) error {
	if init == nil { // checked here, where every rank agrees on the outcome
		return fmt.Errorf("optimizer: no initial values (the InitFunc is nil; optimizer.FromMap makes one from a map): %w", ErrConfig)
	}
	for i, p := range o.params {
		if err := init(p.Name, o.layout.Places[i].Len, nil); err != nil {
			return fmt.Errorf("optimizer: initial value of %q: %w", p.Name, err)
		}
	}
	for _, bk := range o.buckets {
		for _, pc := range bk.pieces {
			if pc.Len == 0 {
				continue
			}
			vals := make([]float32, pc.Len)
			if err := init(o.params[pc.Param].Name, pc.ParamOffset, vals); err != nil {
				return fmt.Errorf("optimizer: initial value of %q: %w", o.params[pc.Param].Name, err)
			}
			if err := checkInitial(o.params[pc.Param].Name, pc.ParamOffset, vals); err != nil {
				return err
			}
			if err := o.backend.Write(bk.master, 4*pc.ShardOffset, float32Bytes(vals)); err != nil {
				return err
			}
		}
	}
	return nil
}

// Close releases the optimizer's buffers (not the communicator or backend).
// It first waits for the collectives the pipeline has in flight (for at
// most 10 seconds, after which the communicator aborts them) and returns
// their error, if any.
func (o *Optimizer) Close() error {
	var err error
	if o.buckets != nil {
		err = o.drain()
	}
	free := func(b buffer.Buffer) {
		if b != nil {
			o.backend.Free(b)
		}
	}
	if o.statsPlan != nil {
		if e := o.statsPlan.Close(); err == nil {
			err = e
		}
		o.statsPlan = nil
	}
	if e := o.closePlans(); err == nil {
		err = e
	}
	o.unbind() // the caller's
	for _, bk := range o.buckets {
		for _, b := range []buffer.Buffer{bk.grad, bk.acc, bk.master, bk.m, bk.v, bk.data, bk.blocks} {
			free(b)
		}
	}
	if o.pool != nil {
		for _, b := range o.pool.bufs {
			free(b)
		}
	}
	for _, b := range []buffer.Buffer{o.amax, o.scale, o.scaleIn, o.stats, o.control.buf} {
		free(b)
	}
	if o.deviceHist != nil {
		free(o.deviceHist.hist)
		free(o.deviceHist.cast)
	}
	o.buckets = nil
	return err
}
