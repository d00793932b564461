package optimizer

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync/atomic"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer/backend"
	"github.com/distopt/distopt/shard"
)

// InitFunc fills dst with the elements [offset, offset+len(dst)) of the
// named parameter's initial value, flattened row-major. Every rank must give
// the same values. An error on any rank makes New fail on every rank.
// New also calls it once per parameter with offset at the parameter's
// element count and an empty dst: a check of the value's length (FromMap
// refuses a longer value there).
type InitFunc func(name string, offset int, dst []float32) error

// FromMap is an InitFunc reading full initial tensors from a map. A name
// missing from the map, or a tensor of other than the parameter's number of
// elements, is an error wrapping ErrConfig (New adds the parameter's name).
func FromMap(m map[string][]float32) InitFunc {
	return func(name string, offset int, dst []float32) error {
		v, ok := m[name]
		switch {
		case !ok:
			return fmt.Errorf("not in the map: %w", ErrConfig)
		case len(dst) == 0 && offset != len(v): // New's check of the length
			return fmt.Errorf("%d elements, want %d: %w", len(v), offset, ErrConfig)
		case offset+len(dst) > len(v):
			return fmt.Errorf("%d elements, want at least %d: %w", len(v), offset+len(dst), ErrConfig)
		}
		copy(dst, v[offset:offset+len(dst)])
		return nil
	}
}

// Optimizer is one rank of the distributed optimizer. Its methods are not
// safe for concurrent use, except GradReady and SetGrad with each other;
// each rank drives its own Optimizer.
type Optimizer struct {
	cfg     Config
	comm    collective.Communicator
	backend backend.Backend
	layout  *shard.Layout
	params  []Param
	rank    int

	buckets []*bucket

	// Slots: one per FP8 parameter for the per-tensor recipes, one per tile
	// for 128x128. slotOf[p] is the first slot of parameter p (-1: none).
	slotOf  []int
	nSlots  int
	amax    buffer.Buffer // uint32 x nSlots
	scale   buffer.Buffer // float32 x nSlots: the scale of the next cast
	scaleIn buffer.Buffer // float32 x nSlots: scale_inv of the bytes held now
	stats   buffer.Buffer // int64 x StatsLen
	scales  *scaleState   // host state of the slots' scales

	statsPlan backend.GradStatsPlan // the buckets' statistics in one pass (nil: per bucket)
	plans     stepPlans             // the step's update and cast, planned once (shards.go)

	step       int
	broken     error
	pending    *ScalarState     // applied by the refresh of LoadPieces
	pipe       *pipeline        // the bucket pipeline (GradReady, StepAsync)
	pool       *gradPool        // sharded gradients' buffers (nil without them)
	control    control          // the step control block
	deviceHist *deviceHistories // delayed scaling's histories on the device (nil: host only)

	gradWritten atomic.Bool // a gradient may have been written since the last Step (nograd.go)
}

type bucket struct {
	idx    int
	b      shard.Bucket
	lo, hi int
	pieces []shard.Piece
	segs   []backend.Segment
	grad   buffer.Buffer // GradType x Size (nil with sharded gradients)
	acc    buffer.Buffer // GradType x ShardSize: the reduced gradient shard (sharded gradients only)
	master buffer.Buffer // float32 x ShardSize
	m, v   buffer.Buffer
	data   buffer.Buffer // FP8: Recipe.DataBytes(Size); high precision: HighPrecisionType x Size
	blocks buffer.Buffer // block scales, LocalBlocks recipes only
}

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

// NewLayout returns the flat layout of params on world ranks with opts, as
// New and PredictMemory make it. An error wraps ErrConfig and the shard
// package's error.
func NewLayout(params []Param, world int, opts shard.Options) (*shard.Layout, error) {
	sp := make([]shard.Param, len(params))
	for i, p := range params {
		sp[i] = shard.Param{Name: p.Name, Shape: p.Shape, HighPrecision: p.HighPrecision}
	}
	l, err := shard.New(sp, world, opts)
	if err != nil {
		return nil, fmt.Errorf("optimizer: %w: %w", ErrConfig, err)
	}
	return l, nil
}

// Layout is the flat layout of the optimizer's buffers.
func (o *Optimizer) Layout() *shard.Layout { return o.layout }

// Backend is the backend the optimizer runs on.
func (o *Optimizer) Backend() backend.Backend { return o.backend }

// Config is the configuration in use, defaults filled in.
func (o *Optimizer) Config() Config { return o.cfg }

// StepCount is the number of steps taken (skipped steps do not count).
// After a StepAsync it reads the step's decision (LastResult).
func (o *Optimizer) StepCount() int {
	o.settled()
	return o.step
}

// LossScale is the current loss scale (1 without a loss scaler). After a
// StepAsync it reads the step's decision (LastResult).
func (o *Optimizer) LossScale() float64 {
	o.settled()
	if o.cfg.LossScaler == nil {
		return 1
	}
	return o.cfg.LossScaler.Scale()
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
		{&bk.grad, sizes.grad, !o.cfg.ShardedGradients},
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

func float32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func bytesFloat32(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// agree combines a local outcome with every other rank's: it returns err
// when this rank failed, an error naming a failed rank when another did, and
// nil when all succeeded. Every rank must call it at the same point, so a
// local failure never leaves the others waiting in a later collective.
func (o *Optimizer) agree(ctx context.Context, err error) error {
	var flag int64
	if err != nil {
		flag = int64(o.rank) + 1
	}
	buf, aerr := o.backend.Alloc(8)
	if aerr != nil {
		return errors.Join(err, aerr)
	}
	defer o.backend.Free(buf)
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(flag))
	if werr := o.backend.Write(buf, 0, b[:]); werr != nil {
		return errors.Join(err, werr)
	}
	if rerr := collective.AllReduce(ctx, o.comm, buf, buf, buffer.Int64, collective.Max); rerr != nil {
		return errors.Join(err, rerr)
	}
	if rerr := o.backend.Read(b[:], buf, 0); rerr != nil {
		return errors.Join(err, rerr)
	}
	if err != nil {
		return err
	}
	if r := int64(binary.LittleEndian.Uint64(b[:])); r != 0 {
		return fmt.Errorf("optimizer: rank %d failed: %w", r-1, ErrRemote)
	}
	return nil
}

// Invalidate marks the optimizer broken by err: every later call returns
// ErrBroken. Use it when state loaded from outside cannot be trusted.
func (o *Optimizer) Invalidate(err error) {
	if err == nil {
		err = errors.New("invalidated")
	}
	o.fail(err)
}

// fail marks the optimizer broken by err and returns err.
func (o *Optimizer) fail(err error) error {
	if o.broken == nil {
		o.broken = err
	}
	return err
}

// ErrClosed is returned by every call on an optimizer after Close.
var ErrClosed = errors.New("optimizer: closed")

// usable returns ErrClosed after Close, ErrBroken after a failure.
func (o *Optimizer) usable() error {
	if o.buckets == nil {
		return ErrClosed
	}
	if o.broken != nil {
		return fmt.Errorf("optimizer: %w: %w", ErrBroken, unprefixed{o.broken})
	}
	return nil
}

// ZeroGrad zeroes every gradient buffer. With sharded gradients it zeroes
// the pool buffers lent to buckets being written (a buffer is zeroed when
// lent anyway).
func (o *Optimizer) ZeroGrad() error {
	if err := o.usable(); err != nil {
		return err
	}
	o.markGrad()
	if o.pool != nil {
		return o.zeroPool()
	}
	for b := range o.buckets {
		if err := o.inFlight(b, "ZeroGrad"); err != nil {
			return err
		}
	}
	for _, bk := range o.buckets {
		if err := o.backend.Zero(bk.grad, 0, bk.grad.Len()); err != nil {
			return o.fail(err)
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
