package grpccomm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
)

// failure says why a communicator stopped. It is set once; every group in
// flight and every later group fails with an error built from it.
type failure struct {
	rank     int     // the rank to name: a lost peer, or this rank
	msg      string  // what happened, e.g. "peer lost: connection reset"
	errs     []error // sentinels the errors match besides ErrAborted
	closed   bool    // Close on this rank
	graceful bool    // Close with nothing in flight: peers may drain
}

func (f *failure) Error() string { return fmt.Sprintf("rank %d: %s", f.rank, f.msg) }

// errStopped is returned inside the communicator by goroutines that stop
// because the communicator failed already: there is nothing to report.
var errStopped = errors.New("grpccomm: communicator stopped")

// group is one Start: its ops complete as a whole.
type group struct {
	seq  uint64
	name string // e.g. "all-gather" or "all-gather+barrier"
	ops  []*opState
	// pending counts the parts still running: one sender and one receiver
	// per peer, and the local part.
	pending int
	busy    int   // goroutines reading or writing the group's buffers now
	err     error // why the group failed
	// finished: pending reached 0 or err was set; done is closed once
	// finished and busy is 0, so that no buffer is touched after Wait.
	finished bool
	done     chan struct{}
}

// work is the collective.Work of a group.
type work struct {
	c *Comm
	g *group

	mu     sync.Mutex
	waited bool
	err    error
}

// Wait waits for the group. If ctx ends first, the communicator is aborted
// and the error matches both ctx.Err() and collective.ErrAborted.
func (w *work) Wait(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.waited {
		return w.err
	}
	select {
	case <-w.g.done:
	default:
		select {
		case <-w.g.done:
		case <-ctx.Done():
			w.c.abortWait(w.g, ctx.Err())
			<-w.g.done
			if w.g.err != nil {
				w.err = fmt.Errorf("grpccomm: rank %d: %s: wait ended: %w: %w", w.c.rank, w.g.name, ctx.Err(), w.g.err)
			}
			w.waited = true
			return w.err
		}
	}
	w.err = w.g.err
	w.waited = true
	return w.err
}

// Start enqueues ops as one group (see collective.Communicator). Every rank
// must start the same groups in the same order; a group whose ops differ
// from a peer's fails on both with a *collective.RankError wrapping
// collective.ErrInvalid, and aborts the communicator.
func (c *Comm) Start(ops ...collective.Op) collective.Work {
	states := make([]*opState, len(ops))
	for i, op := range ops {
		o, err := c.newOpState(op)
		if err != nil {
			return collective.DoneWork{Err: err}
		}
		states[i] = o
	}
	if len(ops) == 0 {
		return collective.DoneWork{}
	}
	names := make([]string, len(ops))
	for i, op := range ops {
		names[i] = op.Kind.String()
	}
	name := strings.Join(names, "+")

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failure == nil {
		for _, p := range c.peers {
			if p != nil && p.gone != "" {
				c.failLocked(&failure{rank: p.rank, msg: p.gone, errs: []error{collective.ErrPeerLost}})
				break
			}
		}
	}
	if c.failure != nil {
		return collective.DoneWork{Err: c.groupErr(c.failure, name)}
	}
	g := &group{seq: c.nextSeq, name: name, ops: states, pending: 2*(c.size-1) + 1, done: make(chan struct{})}
	c.nextSeq++
	c.groups[g.seq] = g
	c.cond.Broadcast()
	g.busy++ // the local part
	c.wg.Go(func() { c.local(g) })
	return &work{c: c, g: g}
}

// newOpState checks op and lays out its buffers.
func (c *Comm) newOpState(op collective.Op) (*opState, error) {
	if err := op.Validate(c.size, buffer.Host); err != nil {
		return nil, err
	}
	o := &opState{Op: op}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("grpccomm: %s: %s: %w", op.Kind, fmt.Sprintf(format, args...), collective.ErrInvalid)
	}
	host := func(name string, b buffer.Buffer) ([]byte, error) {
		h, ok := b.(buffer.HostBuffer)
		if !ok {
			return nil, fmt.Errorf("grpccomm: %s: %s buffer is a %T, not a buffer.HostBuffer: %w", op.Kind, name, b, collective.ErrMemoryKind)
		}
		return h, nil
	}
	var err error
	if op.Kind != collective.OpBarrier {
		if o.dst, err = host("dst", op.Dst); err != nil {
			return nil, err
		}
	}
	switch op.Kind {
	case collective.OpAllGather, collective.OpReduceScatter, collective.OpAllReduce, collective.OpAllToAll:
		if o.src, err = host("src", op.Src); err != nil {
			return nil, err
		}
	}
	switch op.Kind {
	case collective.OpAllGather:
		o.unit = len(o.src)
		o.size = len(o.src)
		if own := o.dst[c.rank*o.unit : (c.rank+1)*o.unit]; overlap(o.src, o.dst) && !same(o.src, own) {
			return nil, bad("src overlaps dst but is not this rank's slice of it")
		}
	case collective.OpReduceScatter:
		o.unit = len(o.dst)
		o.size = len(o.dst)
		if own := o.src[c.rank*o.unit : (c.rank+1)*o.unit]; overlap(o.src, o.dst) && !same(o.dst, own) {
			return nil, bad("dst overlaps src but is not this rank's slice of it")
		}
		if c.size > 1 {
			o.red = c.newReducer(o.dst, o.src[c.rank*o.unit:(c.rank+1)*o.unit], op.DType, op.Reduce)
		}
	case collective.OpAllReduce:
		o.size = len(o.dst)
		if overlap(o.src, o.dst) && !same(o.src, o.dst) {
			return nil, bad("src and dst overlap but are not the same buffer")
		}
		es := op.DType.Size()
		elems := len(o.dst) / es
		o.parts = make([]int, c.size+1)
		for p := range o.parts {
			o.parts[p] = p * elems / c.size * es
		}
		if c.size > 1 {
			lo, hi := o.part(c.rank)
			o.red = c.newReducer(o.dst[lo:hi], o.src[lo:hi], op.DType, op.Reduce)
		}
	case collective.OpAllToAll:
		o.unit = len(o.src) / c.size
		o.size = o.unit
	case collective.OpBroadcast:
		o.size = len(o.dst)
	}
	return o, nil
}

// overlap reports whether a and b share a byte.
func overlap(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa, pb := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}

// same reports whether a and b are the same bytes.
func same(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || unsafe.SliceData(a) == unsafe.SliceData(b))
}

// local runs the group's local part: the copy of this rank's own block
// (all-gather out of place), or the whole group when there is one rank.
func (c *Comm) local(g *group) {
	for _, o := range g.ops {
		switch o.Kind {
		case collective.OpAllGather:
			own := o.dst[c.rank*o.unit : (c.rank+1)*o.unit]
			if !same(own, o.src) {
				copy(own, o.src)
			}
		case collective.OpAllToAll:
			copy(o.dst[c.rank*o.unit:(c.rank+1)*o.unit], o.src[c.rank*o.unit:(c.rank+1)*o.unit])
		case collective.OpReduceScatter, collective.OpAllReduce:
			if c.size == 1 {
				collective.Reduce(o.dst, [][]byte{o.src}, o.DType, o.Reduce)
			}
		}
	}
	c.mu.Lock()
	c.leaveLocked(g)
	c.partDoneLocked(g)
	c.mu.Unlock()
}

// enter marks the start of an access to g's buffers; it returns false
// (and nothing may be touched) if g has failed.
func (c *Comm) enter(g *group) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.enterLocked(g)
}

func (c *Comm) enterLocked(g *group) bool {
	if g.err != nil {
		return false
	}
	g.busy++
	return true
}

// leave ends an access started by enter.
func (c *Comm) leave(g *group) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.leaveLocked(g)
}

func (c *Comm) leaveLocked(g *group) {
	g.busy--
	if g.busy == 0 && g.finished {
		close(g.done)
	}
}

// partDone records that one part of g has finished.
func (c *Comm) partDone(g *group) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.partDoneLocked(g)
}

func (c *Comm) partDoneLocked(g *group) {
	g.pending--
	if g.pending == 0 && !g.finished {
		g.finished = true
		delete(c.groups, g.seq)
		if g.busy == 0 {
			close(g.done)
		}
	}
}

// nextGroup waits for the group numbered seq and returns it; nil when the
// communicator fails first, or, for p's receiver (p not nil), when p has
// gone and will send nothing more.
func (c *Comm) nextGroup(seq uint64, p *peer) *group {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		if c.failure != nil {
			return nil
		}
		if g := c.groups[seq]; g != nil {
			return g
		}
		if p != nil && p.gone != "" {
			return nil
		}
		c.cond.Wait()
	}
}

// fail stops the communicator for f (no-op if it has stopped already).
func (c *Comm) fail(f *failure) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failLocked(f)
}

func (c *Comm) failLocked(f *failure) {
	if c.failure != nil {
		return
	}
	c.failure = f
	if l := c.cfg.Logger; l != nil && !f.closed {
		l.Warn("grpccomm: communicator failed", "rank", c.rank, "blames", f.rank, "why", f.msg)
	}
	close(c.dead)
	for _, g := range c.groups {
		if !g.finished {
			g.err = c.groupErr(f, g.name)
			g.finished = true
			if g.busy == 0 {
				close(g.done)
			}
		}
	}
	c.cond.Broadcast()
	if !f.graceful {
		c.cancel() // cut the outbound streams at once
	}
}

// abortWait aborts the communicator because the context of g's Wait ended
// with err, unless g has completed.
func (c *Comm) abortWait(g *group, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if g.finished && g.err == nil {
		return
	}
	c.failLocked(&failure{rank: c.rank, msg: fmt.Sprintf("aborted: wait for %s ended: %v", g.name, err)})
}

// groupErr is the error of an op (or group) named op on a communicator that
// stopped for f.
func (c *Comm) groupErr(f *failure, op string) error {
	if f.closed && f.rank == c.rank {
		return fmt.Errorf("grpccomm: rank %d: %s: %w", c.rank, op, collective.ErrClosed)
	}
	errs := append([]error{collective.ErrAborted}, f.errs...)
	return &collective.RankError{Rank: f.rank, Op: op, Err: &tagged{msg: f.msg, errs: errs}}
}

// peerGone records that p will send nothing more (why) and wakes whoever
// waits for it.
func (c *Comm) peerGone(p *peer, why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p.gone == "" {
		p.gone = why
	}
	c.cond.Broadcast()
}

// peerLost fails the communicator because the link with p broke with err,
// unless p had closed on purpose or the communicator failed already.
func (c *Comm) peerLost(p *peer, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p.gone != "" || c.failure != nil {
		return
	}
	c.failLocked(c.peerFailure(p, err))
}

// peerFailure describes, for this rank, the end of the link with p when
// err ended it. A peer that aborted says so in its status (see endStatus),
// naming the rank it blames: the failure names that rank, so that every
// survivor names the same culprit, unless it is this rank, and then the
// reporting peer is named. A peer that found mismatched ops says so with
// InvalidArgument, and the failure matches collective.ErrInvalid.
func (c *Comm) peerFailure(p *peer, err error) *failure {
	rank := p.rank
	st, ok := status.FromError(err)
	errs := []error{collective.ErrPeerLost}
	switch {
	case !ok:
		return &failure{rank: rank, msg: lossMsg(p, err, c.cfg.KeepaliveTime+c.cfg.KeepaliveTimeout), errs: errs}
	case st.Code() == codes.InvalidArgument:
		errs = []error{collective.ErrInvalid}
	case st.Code() != codes.Aborted:
		return &failure{rank: rank, msg: lossMsg(p, err, c.cfg.KeepaliveTime+c.cfg.KeepaliveTimeout), errs: errs}
	}
	culprit, msg, ok := parseBlame(st.Message())
	switch {
	case !ok:
		return &failure{rank: rank, msg: "aborted: " + st.Message(), errs: errs}
	case culprit == rank || culprit == c.rank:
		return &failure{rank: rank, msg: msg, errs: errs}
	}
	return &failure{rank: culprit, msg: fmt.Sprintf("%s (reported by rank %d)", msg, rank), errs: errs}
}

// lossMsg says how the link with p broke with err, and since when nothing
// came from p. A link that ended without a word from the peer (the stream
// canceled under this rank, or keepalive pings unanswered) means the peer
// stopped responding (hung, stopped, or cut off); silence is the longest
// keepalive lets pass.
func lossMsg(p *peer, err error, silence time.Duration) string {
	cause := err.Error()
	if st, ok := status.FromError(err); ok {
		cause = st.Message()
	}
	last := "nothing received from it yet"
	if ns := p.heard.Load(); ns != 0 {
		at := time.Unix(0, ns)
		last = fmt.Sprintf("nothing received from it since %s (%v ago)", at.Format("15:04:05.000"), time.Since(at).Round(time.Millisecond))
	}
	code := status.Code(err)
	if errors.Is(err, context.Canceled) || code == codes.Canceled || code == codes.DeadlineExceeded || strings.Contains(cause, "keepalive") {
		return fmt.Sprintf("peer lost: stopped responding: %s; its connection was closed (%s; keepalive gives up after about %v of silence)", last, cause, silence)
	}
	return fmt.Sprintf("peer lost: %s; %s", cause, last)
}

// endStatus is what this rank's handlers return when they stop: OK after a
// graceful Close or once the peer has gone, else a status that blames the
// failure's rank ("rank R: why"): InvalidArgument for mismatched ops,
// Aborted for anything else.
func (c *Comm) endStatus() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.failure
	if f == nil || f.graceful {
		return nil
	}
	code := codes.Aborted
	if slices.Contains(f.errs, collective.ErrInvalid) {
		code = codes.InvalidArgument
	}
	return status.Error(code, "rank "+strconv.Itoa(f.rank)+": "+f.msg)
}

// parseBlame splits an Aborted status message of endStatus.
func parseBlame(s string) (rank int, msg string, ok bool) {
	head, msg, ok := strings.Cut(s, ": ")
	num, found := strings.CutPrefix(head, "rank ")
	if !ok || !found {
		return 0, "", false
	}
	rank, err := strconv.Atoi(num)
	return rank, msg, err == nil
}

// handshakeStatus is the status of a refused hello.
func handshakeStatus(format string, args ...any) error {
	return status.Errorf(codes.FailedPrecondition, format, args...)
}

// handshakeErr turns the status of a refused hello into an error wrapping
// ErrHandshake; other errors pass unchanged.
func handshakeErr(err error) error {
	if st, ok := status.FromError(err); ok && st.Code() == codes.FailedPrecondition {
		return fmt.Errorf("%s: %w", st.Message(), ErrHandshake)
	}
	return err
}
