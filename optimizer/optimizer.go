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
	bound       atomic.Bool // gradient buffers lent for the next step (external.go)
}

type bucket struct {
	idx    int
	b      shard.Bucket
	lo, hi int
	pieces []shard.Piece
	segs   []backend.Segment
	grad   buffer.Buffer // GradType x Size (nil with sharded gradients; lent by BindGrads with external ones)
	acc    buffer.Buffer // GradType x ShardSize: the reduced gradient shard (sharded gradients only)
	master buffer.Buffer // float32 x ShardSize
	m, v   buffer.Buffer
	data   buffer.Buffer // FP8: Recipe.DataBytes(Size); high precision: HighPrecisionType x Size
	blocks buffer.Buffer // block scales, LocalBlocks recipes only
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
	if err := o.needGrads("ZeroGrad", ""); err != nil {
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
