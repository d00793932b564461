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

// FromMap is an InitFunc reading full initial tensors from a map. A name
// missing from the map, or a tensor too short, is an error wrapping
// ErrConfig (New adds the parameter's name).
func FromMap(m map[string][]float32) InitFunc {
	return func(name string, offset int, dst []float32) error {
		v, ok := m[name]
		if !ok {
			return fmt.Errorf("not in the map: %w", ErrConfig)
		}
		if offset+len(dst) > len(v) {
			return fmt.Errorf("%d elements, want at least %d: %w", len(v), offset+len(dst), ErrConfig)
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
	history []*fp8.AmaxHistory
	hScale  []float32 // host copies: the scale of the next cast,
	hInv    []float32 // the scale_inv of the bytes held now,
	hCast   []float32 // and the scale those bytes were cast with

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
	data   collective.Buffer // FP8: byte x Size; high precision: HighPrecisionType x Size
	blocks collective.Buffer // block scales, FP8 block recipes only
	block  int               // block size of ModeBlock (0 otherwise)
}

// New makes rank comm.Rank() of a distributed optimizer over params, with
// buffers on be, masters set from init, and the FP8 (and high-precision)
// parameters cast and gathered before it returns. All ranks must call New
// with the same parameters and configuration; a difference is reported as
// ErrMismatch naming what differs.
func New(ctx context.Context, comm collective.Communicator, be Backend, params []Param, init InitFunc, cfg Config) (*Optimizer, error) {
	if comm.Memory() != be.Memory() {
		return nil, fmt.Errorf("optimizer: communicator takes %s memory but backend %s allocates %s memory: %w", comm.Memory(), be.Name(), be.Memory(), ErrConfig)
	}
	cfg.setDefaults()
	if err := cfg.validate(params); err != nil {
		return nil, err
	}
	sp := make([]shard.Param, len(params))
	for i, p := range params {
		sp[i] = shard.Param{Name: p.Name, Shape: p.Shape, HighPrecision: p.HighPrecision}
	}
	layout, err := shard.New(sp, comm.Size(), cfg.Layout)
	if err != nil {
		return nil, fmt.Errorf("optimizer: %w: %w", ErrConfig, err)
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
	if err := o.refresh(ctx); err != nil {
		o.Close()
		return nil, err
	}
	return o, nil
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

func (o *Optimizer) recipeMode() Mode {
	switch o.cfg.Recipe.Scaling {
	case fp8.TensorDelayed:
		return ModeTensorDelayed
	case fp8.Block1x128, fp8.MXFP8:
		return ModeBlock
	case fp8.Block128x128:
		return ModeTile
	}
	return ModeTensorCurrent
}

func (o *Optimizer) allocate() error {
	mode := o.recipeMode()
	o.slotOf = make([]int, len(o.params))
	for i, p := range o.params {
		o.slotOf[i] = -1
		if p.HighPrecision || mode == ModeBlock {
			continue
		}
		o.slotOf[i] = o.nSlots
		if mode == ModeTile {
			o.nSlots += o.cfg.Recipe.NumScales(p.Shape)
		} else {
			o.nSlots++
		}
	}
	alloc := func(n int) (collective.Buffer, error) { return o.be.Alloc(n) }
	var err error
	if o.nSlots > 0 {
		if o.amax, err = alloc(4 * o.nSlots); err != nil {
			return err
		}
		if o.scale, err = alloc(4 * o.nSlots); err != nil {
			return err
		}
		if o.scaleIn, err = alloc(4 * o.nSlots); err != nil {
			return err
		}
		o.hScale = make([]float32, o.nSlots)
		o.hInv = make([]float32, o.nSlots)
		o.hCast = make([]float32, o.nSlots)
		if mode == ModeTensorDelayed {
			o.history = make([]*fp8.AmaxHistory, o.nSlots)
			for i := range o.history {
				o.history[i] = o.cfg.Recipe.NewHistory()
			}
		}
	}
	if o.stats, err = alloc(8 * StatsLen); err != nil {
		return err
	}
	gsz, msz := o.cfg.GradType.Size(), o.cfg.MomentType.Size()
	for bi, b := range o.layout.Buckets {
		bk := &bucket{idx: bi, b: b}
		bk.lo, bk.hi = o.layout.ShardRange(bi, o.rank)
		bk.pieces = o.layout.Pieces(bi, o.rank)
		n := b.ShardSize
		if bk.grad, err = alloc(gsz * b.Size); err != nil {
			return err
		}
		if bk.master, err = alloc(4 * n); err != nil {
			return err
		}
		if bk.m, err = alloc(msz * n); err != nil {
			return err
		}
		if o.cfg.Rule == RuleAdamW {
			if bk.v, err = alloc(msz * n); err != nil {
				return err
			}
		}
		if b.HighPrecision {
			if bk.data, err = alloc(o.cfg.HighPrecisionType.Size() * b.Size); err != nil {
				return err
			}
		} else {
			if bk.data, err = alloc(b.Size); err != nil {
				return err
			}
			if mode == ModeBlock {
				_, bk.block = o.cfg.Recipe.Block()
				per := 4
				if o.cfg.Recipe.Scaling == fp8.MXFP8 {
					per = 1
				}
				if bk.blocks, err = alloc(per * b.Size / bk.block); err != nil {
					return err
				}
			}
		}
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
		o.buckets = append(o.buckets, bk)
	}
	return nil
}

// loadMasters sets the master shards from init.
func (o *Optimizer) loadMasters(init InitFunc) error {
	for _, bk := range o.buckets {
		for _, pc := range bk.pieces {
			vals := make([]float32, pc.Len)
			if err := init(o.params[pc.Param].Name, pc.ParamOffset, vals); err != nil {
				return fmt.Errorf("optimizer: initial value of %q: %w", o.params[pc.Param].Name, err)
			}
			if err := checkInitial(o.params[pc.Param].Name, pc.ParamOffset, vals); err != nil {
				return err
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
// masters as they are and gathers it: the initial cast, and the cast after a
// checkpoint load. Delayed-scaling histories receive the amax of this cast.
func (o *Optimizer) refresh(ctx context.Context) error {
	var t Timings
	return o.castAndGather(ctx, &UpdateArgs{Rule: RuleNone}, phaseInit, &t)
}

// phase says why castAndGather runs.
type phase uint8

const (
	phaseInit   phase = iota // first cast from the initial masters
	phaseStep                // after an update
	phaseReload              // after a checkpoint load
)

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
func (o *Optimizer) Step(ctx context.Context) (StepResult, error) {
	if err := o.usable(); err != nil {
		return StepResult{}, err
	}
	if err := o.cfg.checkLRs(o.step + 1); err != nil { // before anything moves
		return StepResult{}, err
	}
	res := StepResult{LossScale: o.LossScale(), ClipCoef: 1}
	t0 := time.Now()
	// 1. Reduce-scatter (average) every bucket, in place, as one group.
	ops := make([]collective.Op, len(o.buckets))
	gsz := o.cfg.GradType.Size()
	for i, bk := range o.buckets {
		ops[i] = collective.Op{Kind: collective.OpReduceScatter, Src: bk.grad, Dst: o.slice(bk.grad, gsz*bk.lo, gsz*bk.hi), DType: o.cfg.GradType, Reduce: collective.Avg}
	}
	if err := o.comm.Start(ops...).Wait(ctx); err != nil {
		return res, o.fail(fmt.Errorf("optimizer: gradient reduce-scatter: %w", err))
	}
	t1 := time.Now()
	res.Timings.ReduceScatter = t1.Sub(t0)
	// 2. Non-finite check and global norm: ONE small all-reduce.
	if err := o.be.Zero(o.stats, 0, 8*StatsLen); err != nil {
		return res, o.fail(err)
	}
	for _, bk := range o.buckets {
		if err := o.be.GradStats(o.stats, o.slice(bk.grad, gsz*bk.lo, gsz*bk.hi), o.cfg.GradType, bk.b.ShardSize); err != nil {
			return res, o.fail(err)
		}
	}
	if err := collective.AllReduce(ctx, o.comm, o.stats, o.stats, collective.Int64, collective.Sum); err != nil {
		return res, o.fail(fmt.Errorf("optimizer: gradient norm all-reduce: %w", err))
	}
	raw := make([]byte, 8*StatsLen)
	if err := o.be.Read(raw, o.stats, 0); err != nil {
		return res, o.fail(err)
	}
	var st [StatsLen]int64
	for i := range st {
		st[i] = int64(binary.LittleEndian.Uint64(raw[8*i:]))
	}
	res.GradNorm = math.Sqrt(SumOfSquares(&st)) / res.LossScale
	t2 := time.Now()
	res.Timings.Norm = t2.Sub(t1)
	if st[NormLimbs] != 0 {
		res.Skipped = true
		res.Reason = fmt.Sprintf("%d gradient elements are not finite (or square past float32)", st[NormLimbs])
		res.GradNorm = math.Inf(1)
		if o.cfg.LossScaler != nil {
			o.cfg.LossScaler.update(false)
		}
		res.Step = o.step
		return res, nil
	}
	if o.cfg.LossScaler != nil {
		o.cfg.LossScaler.update(true)
	}
	if o.cfg.MaxGradNorm > 0 {
		res.ClipCoef = min(1, o.cfg.MaxGradNorm/(res.GradNorm+1e-6))
	}
	o.step++
	res.Step = o.step
	// 3-7. Update, amax, cast, gather.
	a := o.hyper(res.ClipCoef / res.LossScale)
	if err := o.castAndGather(ctx, a, phaseStep, &res.Timings); err != nil {
		return res, err
	}
	return res, nil
}

// hyper computes the per-step scalars for step o.step.
func (o *Optimizer) hyper(gradScale float64) *UpdateArgs {
	c := &o.cfg
	t := float64(o.step)
	a := &UpdateArgs{Rule: c.Rule}
	a.Hyper = Hyper{
		GradScale:     float32(gradScale),
		Beta1:         float32(c.Beta1),
		Beta2:         float32(c.Beta2),
		OneMinusBeta1: float32(1 - c.Beta1),
		OneMinusBeta2: float32(1 - c.Beta2),
		Eps:           float32(c.Eps),
		RBC2:          float32(1 / math.Sqrt(1-math.Pow(c.Beta2, t))),
		Momentum:      float32(c.Momentum),
	}
	return a
}

// segmentFactors fills the per-parameter factors of the rule for this step.
func (o *Optimizer) segmentFactors(a *UpdateArgs, bk *bucket) []Segment {
	segs := make([]Segment, len(bk.segs))
	copy(segs, bk.segs)
	c := &o.cfg
	t := float64(o.step)
	for i := range segs {
		p := o.params[bk.pieces[i].Param]
		g := c.Groups[p.Group]
		lr := g.LR.LR(o.step)
		wd := g.WeightDecay
		if p.NoDecay {
			wd = 0
		}
		switch a.Rule {
		case RuleAdamW:
			segs[i].StepSize = float32(lr / (1 - math.Pow(c.Beta1, t)))
			segs[i].Decay = float32(1 - lr*wd)
		case RuleSGD:
			segs[i].StepSize = float32(lr)
			segs[i].Decay = float32(wd)
		}
	}
	return segs
}

// castAndGather runs the update (or, with RuleNone, only the cast), the
// packed amax all-reduce, the cast of current-scaling segments, and the
// gather of every bucket.
func (o *Optimizer) castAndGather(ctx context.Context, a *UpdateArgs, ph phase, t *Timings) error {
	initial := ph == phaseInit
	mode := o.recipeMode()
	castMode := mode
	if initial && mode == ModeTensorDelayed {
		castMode = ModeTensorCurrent // seed the histories from the masters
	}
	t0 := time.Now()
	if o.nSlots > 0 {
		if err := o.be.Zero(o.amax, 0, 4*o.nSlots); err != nil {
			return o.fail(err)
		}
	}
	gsz := o.cfg.GradType.Size()
	for _, bk := range o.buckets {
		u := *a
		u.N = bk.b.ShardSize
		u.Master, u.M, u.V = bk.master, bk.m, bk.v
		u.MomentType = o.cfg.MomentType
		u.Grad = o.slice(bk.grad, gsz*bk.lo, gsz*bk.hi)
		u.GradType = o.cfg.GradType
		u.Segments = o.segmentFactors(a, bk)
		for i := range u.Segments {
			if u.Segments[i].Mode == mode {
				u.Segments[i].Mode = castMode
			}
		}
		u.Recipe = o.cfg.Recipe
		u.Amax, u.Scale = o.amax, o.scale
		if bk.b.HighPrecision {
			u.HP = o.slice(bk.data, o.cfg.HighPrecisionType.Size()*bk.lo, o.cfg.HighPrecisionType.Size()*bk.hi)
			u.HPType = o.cfg.HighPrecisionType
		} else {
			u.FP8 = o.slice(bk.data, bk.lo, bk.hi)
			if bk.blocks != nil {
				per := bk.blocks.Len() / (bk.b.Size / bk.block)
				u.BlockScales = o.slice(bk.blocks, per*bk.lo/bk.block, per*bk.hi/bk.block)
			}
		}
		if err := o.be.Update(&u); err != nil {
			return o.fail(fmt.Errorf("optimizer: update of bucket %d: %w", bk.idx, err))
		}
	}
	t1 := time.Now()
	t.Update = t1.Sub(t0)
	if o.nSlots > 0 {
		// ONE packed all-reduce(MAX) of every amax of the step.
		if err := collective.AllReduce(ctx, o.comm, o.amax, o.amax, collective.Uint32, collective.Max); err != nil {
			return o.fail(fmt.Errorf("optimizer: amax all-reduce: %w", err))
		}
		raw := make([]byte, 4*o.nSlots)
		if err := o.be.Read(raw, o.amax, 0); err != nil {
			return o.fail(err)
		}
		amax := bytesFloat32(raw)
		r := o.cfg.Recipe
		for s, am := range amax {
			switch {
			case castMode == ModeTensorDelayed:
				// The bytes were cast with hScale; the next cast uses the
				// history including this step's amax (a reload restores the
				// history as saved and pushes nothing).
				o.hCast[s], o.hInv[s] = o.hScale[s], 1/o.hScale[s]
				if ph == phaseStep {
					o.history[s].Push(am)
				}
				o.hScale[s], _ = o.history[s].Scale(r.Format, r.Margin, r.PowerOf2)
			default:
				o.hScale[s], o.hInv[s] = fp8.ScaleFromAmax(am, r.Format, r.Margin, r.PowerOf2)
				if o.history != nil { // initial cast of delayed scaling
					o.history[s].Push(am)
					o.hScale[s], o.hInv[s] = o.history[s].Scale(r.Format, r.Margin, r.PowerOf2)
				}
				o.hCast[s] = o.hScale[s]
			}
		}
		if err := o.be.Write(o.scale, 0, float32Bytes(o.hScale)); err != nil {
			return o.fail(err)
		}
		if err := o.be.Write(o.scaleIn, 0, float32Bytes(o.hInv)); err != nil {
			return o.fail(err)
		}
	}
	t2 := time.Now()
	t.AmaxReduce = t2.Sub(t1)
	if castMode == ModeTensorCurrent || castMode == ModeTile {
		for _, bk := range o.buckets {
			if bk.b.HighPrecision {
				continue
			}
			c := CastArgs{N: bk.b.ShardSize, Master: bk.master, Segments: bk.segs, Format: o.cfg.Recipe.Format, FP8: o.slice(bk.data, bk.lo, bk.hi), Scale: o.scale}
			if initial && mode == ModeTensorDelayed {
				c.Segments = make([]Segment, len(bk.segs))
				copy(c.Segments, bk.segs)
				for i := range c.Segments {
					if c.Segments[i].Mode == ModeTensorDelayed {
						c.Segments[i].Mode = ModeTensorCurrent
					}
				}
			}
			if err := o.be.Cast(&c); err != nil {
				return o.fail(fmt.Errorf("optimizer: cast of bucket %d: %w", bk.idx, err))
			}
		}
	}
	t3 := time.Now()
	t.Cast = t3.Sub(t2)
	// All-gather every bucket in place (and its block scales), as one group.
	var ops []collective.Op
	for _, bk := range o.buckets {
		esz := 1
		if bk.b.HighPrecision {
			esz = o.cfg.HighPrecisionType.Size()
		}
		ops = append(ops, collective.Op{Kind: collective.OpAllGather, Dst: bk.data, Src: o.slice(bk.data, esz*bk.lo, esz*bk.hi)})
		if bk.blocks != nil {
			per := bk.blocks.Len() / (bk.b.Size / bk.block)
			ops = append(ops, collective.Op{Kind: collective.OpAllGather, Dst: bk.blocks, Src: o.slice(bk.blocks, per*bk.lo/bk.block, per*bk.hi/bk.block)})
		}
	}
	if err := o.comm.Start(ops...).Wait(ctx); err != nil {
		return o.fail(fmt.Errorf("optimizer: parameter all-gather: %w", err))
	}
	if err := o.be.Sync(); err != nil {
		return o.fail(err)
	}
	t.AllGather = time.Since(t3)
	return nil
}

// slice returns bytes [lo, hi) of a backend buffer.
func (o *Optimizer) slice(b collective.Buffer, lo, hi int) collective.Buffer {
	switch x := b.(type) {
	case collective.HostBuffer:
		return x[lo:hi:hi]
	case collective.DeviceBuffer:
		return x.Slice(lo, hi)
	}
	panic(fmt.Sprintf("optimizer: cannot slice a %T", b))
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
