package optimizer

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/shard"
)

// InitFunc fills dst with the elements [offset, offset+len(dst)) of the
// named parameter's initial value, flattened row-major. Every rank must give
// the same values. An error on any rank makes New fail on every rank.
type InitFunc func(name string, offset int, dst []float32) error

// FromMap is an InitFunc reading full initial tensors from a map.
func FromMap(m map[string][]float32) InitFunc {
	return func(name string, offset int, dst []float32) error {
		v, ok := m[name]
		if !ok {
			return fmt.Errorf("optimizer: no initial value for %q: %w", name, ErrUnknownParam)
		}
		if offset+len(dst) > len(v) {
			return fmt.Errorf("optimizer: initial value of %q has %d elements, want at least %d: %w", name, len(v), offset+len(dst), ErrConfig)
		}
		copy(dst, v[offset:offset+len(dst)])
		return nil
	}
}

// Optimizer is one rank of the distributed optimizer. Its methods are not
// safe for concurrent use; each rank drives its own Optimizer.
type Optimizer struct {
	cfg    Config
	comm   collective.Communicator
	be     Backend
	layout *shard.Layout
	params []Param
	rank   int

	buckets []*bucket

	// Slots: one per FP8 parameter for the per-tensor recipes, one per tile
	// for 128x128. slotOf[p] is the first slot of parameter p (-1: none).
	slotOf  []int
	nSlots  int
	amax    collective.Buffer // uint32 x nSlots
	scale   collective.Buffer // float32 x nSlots: the scale of the next cast
	scaleIn collective.Buffer // float32 x nSlots: scale_inv of the bytes held now
	stats   collective.Buffer // int64 x StatsLen
	scales  *scaleState       // host state of the slots' scales

	step    int
	broken  error
	pending *ScalarState // applied by the refresh of LoadPieces
}

type bucket struct {
	idx    int
	b      shard.Bucket
	lo, hi int
	pieces []shard.Piece
	segs   []Segment
	grad   collective.Buffer // GradType x Size
	master collective.Buffer // float32 x ShardSize
	m, v   collective.Buffer
	data   collective.Buffer // FP8: Recipe.DataBytes(Size); high precision: HighPrecisionType x Size
	blocks collective.Buffer // block scales, LocalBlocks recipes only
}

// New makes rank comm.Rank() of a distributed optimizer over params, with
// buffers on be, masters set from init, and the FP8 (and high-precision)
// parameters cast and gathered before it returns. All ranks must call New
// with the same parameters and configuration; a difference is reported as
// ErrMismatch naming what differs.
func New(ctx context.Context, comm collective.Communicator, be Backend, params []Param, init InitFunc, cfg Config) (*Optimizer, error) {
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
	o := &Optimizer{cfg: cfg, comm: comm, be: be, layout: layout, params: append([]Param(nil), params...), rank: comm.Rank()}
	if err := o.checkAgreement(ctx); err != nil {
		return nil, err
	}
	if err := o.allocate(); err != nil {
		o.Close()
		return nil, err
	}
	if err := o.agree(ctx, o.loadMasters(init)); err != nil {
		o.Close()
		return nil, err
	}
	if err := o.refresh(ctx, castFirst); err != nil {
		o.Close()
		return nil, err
	}
	return o, nil
}

// OnDevice is implemented by backends and communicators bound to one GPU
// (optimizer/gpu's Backend, collective/nccl's Comm): Ordinal is the GPU's.
type OnDevice interface {
	Ordinal() int
}

// checkPlacement refuses a communicator and a backend that do not share
// their memory: another memory kind, or (both bound to a GPU) another GPU.
func checkPlacement(comm collective.Communicator, be Backend) error {
	if comm.Memory() != be.Memory() {
		return fmt.Errorf("optimizer: communicator takes %s memory but backend %s allocates %s memory: %w", comm.Memory(), be.Name(), be.Memory(), ErrConfig)
	}
	cd, ok1 := comm.(OnDevice)
	bd, ok2 := be.(OnDevice)
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
func (o *Optimizer) Backend() Backend { return o.be }

// Config is the configuration in use, defaults filled in.
func (o *Optimizer) Config() Config { return o.cfg }

// StepCount is the number of steps taken (skipped steps do not count).
func (o *Optimizer) StepCount() int { return o.step }

// LossScale is the current loss scale (1 without a loss scaler).
func (o *Optimizer) LossScale() float64 {
	if o.cfg.LossScaler == nil {
		return 1
	}
	return o.cfg.LossScaler.Scale()
}

// recipeMode is the Mode of the FP8 segments under recipe r.
func recipeMode(r fp8.Recipe) Mode {
	switch rows, _ := r.Block(); {
	case r.ScaleSource() == fp8.FromHistory:
		return ModeTensorDelayed
	case r.ScaleSource() == fp8.FromBlock:
		return ModeBlock
	case rows > 1:
		return ModeTile
	}
	return ModeTensorCurrent
}

// allocate makes the optimizer's buffers: the scale slots, the statistics
// and every bucket's.
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
		for _, b := range []*collective.Buffer{&o.amax, &o.scale, &o.scaleIn} {
			if *b, err = o.be.Alloc(4 * o.nSlots); err != nil {
				return err
			}
		}
	}
	if o.stats, err = o.be.Alloc(8 * StatsLen); err != nil {
		return err
	}
	for bi, b := range o.layout.Buckets {
		bk, err := o.allocBucket(bi, b)
		o.buckets = append(o.buckets, bk) // freed by Close, even half-made
		if err != nil {
			return err
		}
	}
	return nil
}

// allocBucket makes the buffers and the segment table of bucket bi.
func (o *Optimizer) allocBucket(bi int, b shard.Bucket) (*bucket, error) {
	r := o.cfg.Recipe
	bk := &bucket{idx: bi, b: b}
	bk.lo, bk.hi = o.layout.ShardRange(bi, o.rank)
	bk.pieces = o.layout.Pieces(bi, o.rank)
	sizes := bufferSizes(b, &o.cfg)
	for _, x := range []struct {
		dst *collective.Buffer
		n   int64
		use bool
	}{
		{&bk.grad, sizes.grad, true},
		{&bk.master, sizes.master, true},
		{&bk.m, sizes.moment, true},
		{&bk.v, sizes.moment, len(o.cfg.Rule.def().moments) > 1},
		{&bk.data, sizes.fp8 + sizes.hp, true},
		{&bk.blocks, sizes.blocks, !b.HighPrecision && r.LocalBlocks()},
	} {
		if !x.use {
			continue
		}
		var err error
		if *x.dst, err = o.be.Alloc(int(x.n)); err != nil {
			return bk, err
		}
	}
	mode := recipeMode(r)
	for _, pc := range bk.pieces {
		p := o.params[pc.Param]
		s := Segment{Off: pc.ShardOffset, Len: pc.Len, Mode: mode, Slot: o.slotOf[pc.Param]}
		if p.HighPrecision {
			s.Mode = ModeHighPrecision
		}
		if s.Mode == ModeTile {
			_, s.Cols = fp8.Matrix(p.Shape)
			s.ParamOffset = pc.ParamOffset
		}
		bk.segs = append(bk.segs, s)
	}
	return bk, nil
}

// loadMasters sets the master shards from init.
func (o *Optimizer) loadMasters(init InitFunc) error {
	for _, bk := range o.buckets {
		for _, pc := range bk.pieces {
			vals := make([]float32, pc.Len)
			if err := init(o.params[pc.Param].Name, pc.ParamOffset, vals); err != nil {
				return fmt.Errorf("optimizer: initial value of %q: %w", o.params[pc.Param].Name, err)
			}
			if err := o.be.Write(bk.master, 4*pc.ShardOffset, float32Bytes(vals)); err != nil {
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
	buf, aerr := o.be.Alloc(8)
	if aerr != nil {
		return errors.Join(err, aerr)
	}
	defer o.be.Free(buf)
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(flag))
	if werr := o.be.Write(buf, 0, b[:]); werr != nil {
		return errors.Join(err, werr)
	}
	if rerr := collective.AllReduce(ctx, o.comm, buf, buf, collective.Int64, collective.Max); rerr != nil {
		return errors.Join(err, rerr)
	}
	if rerr := o.be.Read(b[:], buf, 0); rerr != nil {
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

func (o *Optimizer) usable() error {
	if o.broken != nil {
		return fmt.Errorf("%w: %w", ErrBroken, o.broken)
	}
	if o.buckets == nil {
		return fmt.Errorf("optimizer: closed: %w", ErrBroken)
	}
	return nil
}

// refresh recomputes every parameter's FP8 (or high-precision) copy from the
// masters as they are and gathers it: the first cast (castFirst), and the
// recast after a checkpoint load (castReload). Delayed-scaling histories
// receive the amax of the first cast.
func (o *Optimizer) refresh(ctx context.Context, k castKind) error {
	var t Timings
	a := &UpdateArgs{Rule: RuleNone}
	if err := o.update(a, k, &t); err != nil {
		return err
	}
	if err := o.reduceAmax(ctx, k, &t); err != nil {
		return err
	}
	if err := o.cast(k, &t); err != nil {
		return err
	}
	return o.gather(ctx, &t)
}

// Timings holds the phase durations of a step.
type Timings struct {
	ReduceScatter, Norm, Update, AmaxReduce, Cast, AllGather time.Duration
}

// StepResult reports one step.
type StepResult struct {
	Step      int     // steps taken so far, this one included when not skipped
	Skipped   bool    // the gradients were not finite: nothing was updated
	Reason    string  // why the step was skipped
	GradNorm  float64 // global gradient norm before clipping (after unscaling)
	ClipCoef  float64 // factor the gradients were multiplied by (1: no clipping)
	LossScale float64 // the loss scale in effect for this step's gradients
	Timings   Timings
}

// Step reduces the gradients, checks them, updates the masters, casts them
// to FP8 and gathers the parameters. All ranks must call it together. After
// it the gradient buffers hold unspecified values: write every gradient (or
// call ZeroGrad) before the next step.
//
// The six phases are those of the package documentation, one call each.
func (o *Optimizer) Step(ctx context.Context) (StepResult, error) {
	if err := o.usable(); err != nil {
		return StepResult{}, err
	}
	res := StepResult{LossScale: o.LossScale(), ClipCoef: 1}
	t := &res.Timings
	if err := o.reduceGrads(ctx, t); err != nil { // 1
		return res, err
	}
	if err := o.checkGrads(ctx, &res); err != nil || res.Skipped { // 2
		return res, err
	}
	if err := o.update(o.hyper(res.ClipCoef/res.LossScale), castStep, t); err != nil { // 3
		return res, err
	}
	if err := o.reduceAmax(ctx, castStep, t); err != nil { // 4
		return res, err
	}
	if err := o.cast(castStep, t); err != nil { // 5
		return res, err
	}
	return res, o.gather(ctx, t) // 6
}

// since returns the time from *t0 to now and moves *t0 to now.
func since(t0 *time.Time) time.Duration {
	now := time.Now()
	d := now.Sub(*t0)
	*t0 = now
	return d
}

// gradShard returns this rank's shard of bk's gradient buffer.
func (o *Optimizer) gradShard(bk *bucket) collective.Buffer {
	gsz := o.cfg.GradType.Size()
	return bk.grad.Slice(gsz*bk.lo, gsz*bk.hi)
}

// reduceGrads reduce-scatters (averages) every bucket of gradients in place,
// as one group (phase 1).
func (o *Optimizer) reduceGrads(ctx context.Context, t *Timings) error {
	t0 := time.Now()
	ops := make([]collective.Op, len(o.buckets))
	for i, bk := range o.buckets {
		ops[i] = collective.Op{Kind: collective.OpReduceScatter, Src: bk.grad, Dst: o.gradShard(bk), DType: o.cfg.GradType, Reduce: collective.Avg}
	}
	if err := o.comm.Start(ops...).Wait(ctx); err != nil {
		return o.fail(fmt.Errorf("optimizer: gradient reduce-scatter: %w", err))
	}
	t.ReduceScatter = since(&t0)
	return nil
}

// checkGrads is phase 2: the non-finite check and the global norm, with ONE
// small all-reduce. It fills res (norm, clip coefficient, step count), marks
// a step with non-finite gradients skipped, and updates the loss scaler.
func (o *Optimizer) checkGrads(ctx context.Context, res *StepResult) error {
	t0 := time.Now()
	if err := o.be.Zero(o.stats, 0, 8*StatsLen); err != nil {
		return o.fail(err)
	}
	for _, bk := range o.buckets {
		if err := o.be.GradStats(o.stats, o.gradShard(bk), o.cfg.GradType, bk.b.ShardSize); err != nil {
			return o.fail(err)
		}
	}
	if err := collective.AllReduce(ctx, o.comm, o.stats, o.stats, collective.Int64, collective.Sum); err != nil {
		return o.fail(fmt.Errorf("optimizer: gradient norm all-reduce: %w", err))
	}
	raw := make([]byte, 8*StatsLen)
	if err := o.be.Read(raw, o.stats, 0); err != nil {
		return o.fail(err)
	}
	var st [StatsLen]int64
	for i := range st {
		st[i] = int64(binary.LittleEndian.Uint64(raw[8*i:]))
	}
	res.GradNorm = math.Sqrt(SumOfSquares(&st)) / res.LossScale
	res.Timings.Norm = since(&t0)
	finite := st[NormLimbs] == 0
	if o.cfg.LossScaler != nil {
		o.cfg.LossScaler.update(finite)
	}
	if !finite {
		res.Skipped = true
		res.Reason = fmt.Sprintf("%d gradient elements are not finite (or square past float32)", st[NormLimbs])
		res.GradNorm = math.Inf(1)
		res.Step = o.step
		return nil
	}
	if o.cfg.MaxGradNorm > 0 {
		res.ClipCoef = min(1, o.cfg.MaxGradNorm/(res.GradNorm+1e-6))
	}
	o.step++
	res.Step = o.step
	return nil
}

// hyper computes the per-step scalars for step o.step.
func (o *Optimizer) hyper(gradScale float64) *UpdateArgs {
	return &UpdateArgs{Rule: o.cfg.Rule, Hyper: o.cfg.Rule.def().hyper(&o.cfg, o.step, gradScale)}
}

// segmentFactors returns bk's segment table with the rule's per-parameter
// factors of this step and, for the first cast of delayed scaling, the
// delayed segments turned to current scaling (the first cast seeds the
// histories from the masters' own amax).
func (o *Optimizer) segmentFactors(a *UpdateArgs, bk *bucket, k castKind) []Segment {
	segs := make([]Segment, len(bk.segs))
	copy(segs, bk.segs)
	def := a.Rule.def()
	for i := range segs {
		if def.factors != nil {
			p := o.params[bk.pieces[i].Param]
			g := o.cfg.Groups[p.Group]
			wd := g.WeightDecay
			if p.NoDecay {
				wd = 0
			}
			def.factors(&segs[i], &o.cfg, o.step, g.LR.LR(o.step), wd)
		}
	}
	return o.firstCastModes(segs, k)
}

// firstCastModes turns the delayed segments of segs to current scaling for
// the first cast (in place), and returns segs.
func (o *Optimizer) firstCastModes(segs []Segment, k castKind) []Segment {
	if k != castFirst {
		return segs
	}
	for i := range segs {
		if segs[i].Mode == ModeTensorDelayed {
			segs[i].Mode = ModeTensorCurrent
		}
	}
	return segs
}

// update is phase 3: the rule's update of every bucket's shard (nothing
// with RuleNone), fused with what the recipe needs: the amax of the new
// master, or the cast itself where the scale is already known.
func (o *Optimizer) update(a *UpdateArgs, k castKind, t *Timings) error {
	t0 := time.Now()
	if o.nSlots > 0 {
		if err := o.be.Zero(o.amax, 0, 4*o.nSlots); err != nil {
			return o.fail(err)
		}
	}
	for _, bk := range o.buckets {
		if err := o.be.Update(o.updateArgs(a, bk, k)); err != nil {
			return o.fail(fmt.Errorf("optimizer: update of bucket %d: %w", bk.idx, err))
		}
	}
	t.Update = since(&t0)
	return nil
}

// updateArgs returns the arguments of the update of bucket bk: a's rule and
// scalars over bk's buffers.
func (o *Optimizer) updateArgs(a *UpdateArgs, bk *bucket, k castKind) *UpdateArgs {
	u := *a
	u.N = bk.b.ShardSize
	u.Master, u.M, u.V = bk.master, bk.m, bk.v
	u.MomentType = o.cfg.MomentType
	u.Grad = o.gradShard(bk)
	u.GradType = o.cfg.GradType
	u.Segments = o.segmentFactors(a, bk, k)
	o.mustSegments(u.Segments, u.N)
	u.Recipe = o.cfg.Recipe
	u.Amax, u.Scale = o.amax, o.scale
	if bk.b.HighPrecision {
		hsz := o.cfg.HighPrecisionType.Size()
		u.HP = bk.data.Slice(hsz*bk.lo, hsz*bk.hi)
		u.HPType = o.cfg.HighPrecisionType
	} else {
		u.FP8 = o.fp8Shard(bk)
		u.BlockScales = o.blockScaleShard(bk)
	}
	return &u
}

// fp8Shard returns this rank's shard of bk's FP8 data.
func (o *Optimizer) fp8Shard(bk *bucket) collective.Buffer {
	r := o.cfg.Recipe
	return bk.data.Slice(r.DataBytes(bk.lo), r.DataBytes(bk.hi))
}

// blockScaleShard returns this rank's shard of bk's block scales (nil
// without block scales).
func (o *Optimizer) blockScaleShard(bk *bucket) collective.Buffer {
	if bk.blocks == nil {
		return nil
	}
	r := o.cfg.Recipe
	return bk.blocks.Slice(r.BlockScaleBytes(bk.lo), r.BlockScaleBytes(bk.hi))
}

// reduceAmax is phase 4: ONE packed all-reduce (MAX) of every amax of the
// step, from which the scale state derives the scales on every rank alike;
// the scales of the next cast and the scale_inv of the views are written
// back.
func (o *Optimizer) reduceAmax(ctx context.Context, k castKind, t *Timings) error {
	t0 := time.Now()
	defer func() { t.AmaxReduce = since(&t0) }()
	if o.nSlots == 0 {
		return nil
	}
	if err := collective.AllReduce(ctx, o.comm, o.amax, o.amax, collective.Uint32, collective.Max); err != nil {
		return o.fail(fmt.Errorf("optimizer: amax all-reduce: %w", err))
	}
	raw := make([]byte, 4*o.nSlots)
	if err := o.be.Read(raw, o.amax, 0); err != nil {
		return o.fail(err)
	}
	o.scales.reduced(k, bytesFloat32(raw))
	if err := o.be.Write(o.scale, 0, float32Bytes(o.scales.Scale)); err != nil {
		return o.fail(err)
	}
	if err := o.be.Write(o.scaleIn, 0, float32Bytes(o.scales.Inv)); err != nil {
		return o.fail(err)
	}
	return nil
}

// cast is phase 5: the cast of the segments whose scale the amax reduction
// gave (current scaling, tiles, the first cast of delayed scaling); the
// other recipes cast in the update's own pass.
func (o *Optimizer) cast(k castKind, t *Timings) error {
	t0 := time.Now()
	defer func() { t.Cast = since(&t0) }()
	if mode := recipeMode(o.cfg.Recipe); mode == ModeBlock || (mode == ModeTensorDelayed && o.scales.delayed(k)) {
		return nil // cast in the update's pass
	}
	for _, bk := range o.buckets {
		if bk.b.HighPrecision {
			continue
		}
		c := CastArgs{N: bk.b.ShardSize, Master: bk.master, Segments: bk.segs, Format: o.cfg.Recipe.Format, FP8: o.fp8Shard(bk), Scale: o.scale}
		if k == castFirst && o.cfg.Recipe.ScaleSource() == fp8.FromHistory {
			c.Segments = o.firstCastModes(append([]Segment(nil), bk.segs...), k)
		}
		o.mustSegments(c.Segments, c.N)
		if err := o.be.Cast(&c); err != nil {
			return o.fail(fmt.Errorf("optimizer: cast of bucket %d: %w", bk.idx, err))
		}
	}
	return nil
}

// gather is phase 6: the all-gather of every bucket in place (and of its
// block scales), as one group, then a wait for the backend.
func (o *Optimizer) gather(ctx context.Context, t *Timings) error {
	t0 := time.Now()
	var ops []collective.Op
	for _, bk := range o.buckets {
		ops = append(ops, o.gatherOps(bk)...)
	}
	if err := o.comm.Start(ops...).Wait(ctx); err != nil {
		return o.fail(fmt.Errorf("optimizer: parameter all-gather: %w", err))
	}
	if err := o.be.Sync(); err != nil {
		return o.fail(err)
	}
	t.AllGather = since(&t0)
	return nil
}

// gatherOps returns the all-gathers of bucket bk: its data, and its block
// scales when it has them.
func (o *Optimizer) gatherOps(bk *bucket) []collective.Op {
	var src collective.Buffer
	if bk.b.HighPrecision {
		hsz := o.cfg.HighPrecisionType.Size()
		src = bk.data.Slice(hsz*bk.lo, hsz*bk.hi)
	} else {
		src = o.fp8Shard(bk)
	}
	ops := []collective.Op{{Kind: collective.OpAllGather, Dst: bk.data, Src: src}}
	if bk.blocks != nil {
		ops = append(ops, collective.Op{Kind: collective.OpAllGather, Dst: bk.blocks, Src: o.blockScaleShard(bk)})
	}
	return ops
}

// ZeroGrad zeroes every gradient buffer.
func (o *Optimizer) ZeroGrad() error {
	if err := o.usable(); err != nil {
		return err
	}
	for _, bk := range o.buckets {
		if err := o.be.Zero(bk.grad, 0, bk.grad.Len()); err != nil {
			return o.fail(err)
		}
	}
	return nil
}

// Close releases the optimizer's buffers (not the communicator or backend).
func (o *Optimizer) Close() error {
	free := func(b collective.Buffer) {
		if b != nil {
			o.be.Free(b)
		}
	}
	for _, bk := range o.buckets {
		for _, b := range []collective.Buffer{bk.grad, bk.master, bk.m, bk.v, bk.data, bk.blocks} {
			free(b)
		}
	}
	for _, b := range []collective.Buffer{o.amax, o.scale, o.scaleIn, o.stats} {
		free(b)
	}
	o.buckets = nil
	return nil
}
