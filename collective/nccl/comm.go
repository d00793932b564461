package nccl

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	pcuda "github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/cudalink"
	"github.com/distopt/distopt/internal/nccl"
)

// Comm is one rank's NCCL communicator. It implements
// collective.Communicator for device buffers of its GPU.
type Comm struct {
	rank, size int
	cfg        Config
	dev        *cuda.Device
	lib        *nccl.Library
	stream     *cuda.Stream // the communication stream
	kern       *kernels
	pl         planner
	prefix     string // of this communicator's keys in the store
	barrier    cuda.DevicePtr
	release    func() error // closes what Join opened; nil for New
	lane       *cuda.Lane   // the thread that drives NCCL and the communication stream (do)

	// Touched only on the lane's thread (inside do).
	nc         *nccl.Comm  // nil once aborted or destroyed
	tail       *cuda.Event // recorded after each group issued outside a capture (made in setUp)
	tailSeq    uint64      // the seq of that group
	scratch    cuda.DevicePtr
	scratchLen int
	retired    []cuda.DevicePtr

	mu      sync.Mutex
	failure *failure // the first failure; nil while healthy
	closed  bool
	queue   []*Work // started, not yet handed to NCCL
	seq     uint64  // of the last group enqueued (Work.Precedes)

	completedSeq atomic.Uint64      // every group up to this seq has completed on the GPU (Work.Wait)
	live         map[*Work]struct{} // started, not yet finished by Wait
	pool         []*cuda.Event      // events free for reuse
	events       []*cuda.Event      // every event created

	kick    chan struct{} // wakes the issuer
	failedc chan struct{} // closed at the first failure
	stopc   chan struct{} // closed by Close
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

var _ collective.Communicator = (*Comm)(nil)

// New creates this rank's communicator: rank cfg.Store.Rank() of
// cfg.Store.Size(), on cfg.Device. Every rank calls it at about the same
// time, and creates its communicators in the same order. Rank 0 creates the
// NCCL unique id and stores it; the others wait for it. NCCL is opened with
// nccl.Default (libnccl.so.2 or $NCCL_LIBRARY) and initialized
// non-blocking: when ctx ends first, the half-built communicator is aborted
// and the error wraps ctx.Err().
//
// Errors wrap nccl.ErrNoLibrary or nccl.ErrTooOld when NCCL is missing or
// too old, cuda errors for the device, and the store's errors.
func New(ctx context.Context, cfg Config) (*Comm, error) {
	if cfg.Store == nil || cfg.Device == nil {
		panic("collective/nccl: New needs a Store and a Device")
	}
	cfg = cfg.withDefaults()
	lib, err := nccl.Default()
	if err != nil {
		return nil, fmt.Errorf("collective/nccl: %w", err)
	}
	prefix := fmt.Sprintf("collective/nccl/%d/", cfg.Store.Sequence("collective/nccl"))
	return open(ctx, cfg, lib, cfg.Store.Rank(), cfg.Store.Size(), prefix, "")
}

// setUp allocates the communicator's device resources and builds the NCCL
// communicator.
func (c *Comm) setUp(ctx context.Context) error {
	var err error
	if c.lane, err = c.dev.NewLane(); err != nil {
		return err
	}
	if c.stream, err = c.dev.NewStream(); err != nil {
		return err
	}
	if c.kern, err = loadKernels(c.dev); err != nil {
		return err
	}
	if c.barrier, err = c.dev.Alloc(scratchAlign); err != nil {
		return err
	}
	if c.tail, err = c.event(); err != nil { // never recycled: destroyed with the others
		return err
	}
	c.pl = planner{rank: c.rank, size: c.size, exactAvg: c.cfg.ExactAvg, barrier: uintptr(c.barrier), oneRankNoop: c.size == 1 && !c.cfg.OneRankCopies}
	id, err := c.uniqueID(ctx)
	if err != nil {
		return err
	}
	return c.initNCCL(ctx, id)
}

// uniqueID creates (rank 0) or fetches (the others) the NCCL unique id.
func (c *Comm) uniqueID(ctx context.Context) (nccl.UniqueID, error) {
	var id nccl.UniqueID
	key := c.prefix + "id"
	if c.rank == 0 {
		err := c.do(func() error {
			var err error
			id, err = c.lib.UniqueID()
			return err
		})
		if err != nil {
			return id, err
		}
		return id, c.cfg.Store.Set(ctx, key, id[:])
	}
	vals, err := c.cfg.Store.Wait(ctx, key)
	if err != nil {
		return id, err
	}
	if len(vals[0]) != len(id) {
		return id, fmt.Errorf("the unique id in the store has %d bytes, want %d", len(vals[0]), len(id))
	}
	copy(id[:], vals[0])
	return id, nil
}

// initNCCL creates the non-blocking NCCL communicator and polls it until it
// is ready, aborting it when ctx ends first.
func (c *Comm) initNCCL(ctx context.Context, id nccl.UniqueID) error {
	var nc *nccl.Comm
	err := c.do(func() error {
		var err error
		nc, err = c.lib.InitRank(c.size, id, c.rank, nccl.Config{})
		return err
	})
	if err != nil && !errors.Is(err, nccl.ErrInProgress) {
		return err
	}
	for errors.Is(err, nccl.ErrInProgress) {
		select {
		case <-ctx.Done():
			c.do(nc.Abort)
			return fmt.Errorf("NCCL initialization: %w", ctx.Err())
		case <-time.After(time.Millisecond):
		}
		err = c.do(nc.AsyncError)
	}
	if err != nil {
		c.do(nc.Abort)
		return err
	}
	c.nc = nc
	return c.do(func() error {
		for _, q := range []struct {
			name string
			get  func() (int, error)
			want int
		}{{"ncclCommCount", nc.Count, c.size}, {"ncclCommUserRank", nc.UserRank, c.rank}, {"ncclCommCuDevice", nc.CuDevice, c.dev.Ordinal()}} {
			if got, err := q.get(); err != nil || got != q.want {
				return fmt.Errorf("%s = %d, %v; want %d", q.name, got, err, q.want)
			}
		}
		return nil
	})
}

// do runs fn on the communicator's lane: NCCL's calls, the communication
// stream's work and the state that goes with them live on a thread of
// their own, so that groups are handed to NCCL, and waited for, whatever
// the device's worker is doing: a caller may start a group and wait for
// it from inside cuda.Device.Do (optimizer/gpu's Batch runs a whole step
// there). Before the lane exists (a failed set-up) fn runs on the
// device's worker.
func (c *Comm) do(fn func() error) error {
	if c.lane == nil {
		return c.dev.Do(fn)
	}
	return c.lane.Do(fn)
}

// Rank returns this rank.
func (c *Comm) Rank() int { return c.rank }

// Size returns the number of ranks.
func (c *Comm) Size() int { return c.size }

// Memory returns buffer.Device.
func (c *Comm) Memory() buffer.MemoryKind { return buffer.Device }

// Ordinal returns the ordinal of the communicator's GPU.
func (c *Comm) Ordinal() int { return c.dev.Ordinal() }

// Device returns the communicator's GPU.
func (c *Comm) Device() *pcuda.Device { return cudalink.PublicDevice(c.dev) }

// Stream returns the communication stream, on which every group runs.
func (c *Comm) Stream() *pcuda.Stream { return cudalink.PublicStream(c.stream) }

// Library names the NCCL library in use: its version and its path.
func (c *Comm) Library() string { return c.lib.String() }

// Start enqueues ops as one group; see collective.Communicator. It returns
// a *Work. Buffers must be buffer.DeviceBuffer values of the
// communicator's GPU (collective.ErrMemoryKind for other kinds,
// collective.ErrInvalid for another GPU). Start does not wait for the GPU
// or for the other ranks: the group is handed to NCCL by a goroutine of the
// communicator, in the order of the Start calls.
func (c *Comm) Start(ops ...collective.Op) collective.Work {
	return c.StartEach(ops)[0]
}

// StartEach implements collective.GroupStarter: the groups are started in
// order, as by one Start each, with one wait for the compute stream
// (Config.Compute) for all of them: an event is recorded there once, the
// first group with work waits on it, and the others follow that group on
// the communication stream. That is one hop to the device's worker for
// the lot, where Start makes one per group, and no hop waits behind the
// issuer's launch of the groups before it.
func (c *Comm) StartEach(groups ...[]collective.Op) []collective.Work {
	out := make([]collective.Work, len(groups))
	var queued []*Work
	var armErr error
	for i, ops := range groups {
		w := c.prepare(ops)
		out[i] = w
		if w.err != nil || w.plan.empty() {
			continue
		}
		if armErr == nil && len(queued) == 0 && c.cfg.Compute != nil {
			if w.computed, armErr = c.event(); armErr == nil {
				armErr = w.computed.Record(cudalink.Stream(c.cfg.Compute))
			}
		}
		if armErr == nil {
			armErr = c.arm(w)
		}
		if armErr != nil { // this group and every later one fail: none may overtake the compute stream
			w.err = &collective.RankError{Rank: c.rank, Op: w.name, Err: armErr}
			continue
		}
		queued = append(queued, w)
	}
	c.enqueue(queued...)
	return out
}

// prepare returns the Work of a group of ops, validated and planned; its
// err is set when the group fails in Start.
func (c *Comm) prepare(ops []collective.Op) *Work {
	w := &Work{c: c, name: groupName(ops), trace: trace{start: time.Now()}}
	for _, op := range ops {
		if err := op.Validate(c.size, buffer.Device); err != nil {
			w.err = err
			return w
		}
		if err := c.onDevice(op); err != nil {
			w.err = err
			return w
		}
	}
	if err := c.startErr(w.name); err != nil {
		w.err = err
		return w
	}
	w.plan = c.pl.plan(ops)
	return w
}

// arm gives w its done event and its issued channel.
func (c *Comm) arm(w *Work) error {
	var err error
	if w.done, err = c.event(); err != nil {
		return err
	}
	w.issued = make(chan struct{})
	return nil
}

// enqueue hands the armed groups ws, in order, to the issuer; a group
// enqueued after Close began or after a failure fails with startErr.
func (c *Comm) enqueue(ws ...*Work) {
	if len(ws) == 0 {
		return
	}
	c.mu.Lock()
	if c.closed || c.failure != nil {
		c.mu.Unlock()
		for _, w := range ws {
			w.err, w.issued = c.startErr(w.name), nil // Wait returns err at once
			c.recycle(w.computed)
			c.recycle(w.done)
			w.computed, w.done = nil, nil
		}
		return
	}
	c.queue = append(c.queue, ws...)
	for _, w := range ws {
		c.live[w] = struct{}{}
		c.seq++
		w.seq = c.seq
	}
	c.mu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// startErr returns the error of a group started now, or nil.
func (c *Comm) startErr(name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return &collective.RankError{Rank: c.rank, Op: name, Err: collective.ErrClosed}
	case c.failure != nil:
		return c.failure.errFor(c.rank, name)
	}
	return nil
}

// onDevice checks that the buffers of a valid op are on the communicator's
// GPU.
func (c *Comm) onDevice(op collective.Op) error {
	bufs := []buffer.Buffer{op.Dst, op.Src}
	switch op.Kind {
	case collective.OpBarrier:
		bufs = nil
	case collective.OpBroadcast:
		bufs = bufs[:1]
	}
	for _, b := range bufs {
		db, ok := b.(buffer.DeviceBuffer)
		if !ok {
			return fmt.Errorf("collective/nccl: %s: %T is not a buffer.DeviceBuffer: %w", op.Kind, b, collective.ErrMemoryKind)
		}
		if db.Device != c.dev.Ordinal() {
			return fmt.Errorf("collective/nccl: %s: buffer on GPU %d, communicator on GPU %d: %w", op.Kind, db.Device, c.dev.Ordinal(), collective.ErrInvalid)
		}
	}
	return nil
}

// failureNow returns the first failure, or nil.
func (c *Comm) failureNow() *failure {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failure
}

// event returns an event from the pool, or a new one.
func (c *Comm) event() (*cuda.Event, error) {
	c.mu.Lock()
	if n := len(c.pool); n > 0 {
		e := c.pool[n-1]
		c.pool = c.pool[:n-1]
		c.mu.Unlock()
		return e, nil
	}
	c.mu.Unlock()
	e, err := c.dev.NewEvent(false)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.events = append(c.events, e)
	c.mu.Unlock()
	return e, nil
}

// recycle returns e to the pool.
func (c *Comm) recycle(e *cuda.Event) {
	if e == nil {
		return
	}
	c.mu.Lock()
	c.pool = append(c.pool, e)
	c.mu.Unlock()
}

func groupName(ops []collective.Op) string {
	switch len(ops) {
	case 0:
		return "empty group"
	case 1:
		return ops[0].Kind.String()
	}
	return fmt.Sprintf("group of %d ops", len(ops))
}
