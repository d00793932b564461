package collectivetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
)

// guard is the number of bytes before and after every buffer that no op
// may touch; a multiple of 8 so that views stay aligned.
const guard = 64

// guardByte is the pattern of the guard bands and of output buffers.
func guardByte(i int) byte { return byte(0xa5 ^ i*7) }

// env is one rank's view of one case.
type env struct {
	ctx  context.Context
	c    collective.Communicator
	n, r int
	o    Options
	seed int64
	bufs []*gbuf

	// counter is shared by the ranks of Run (nil in RunRank).
	counter *atomic.Int64
	// shared holds the inputs and expected results of Run's cases, computed
	// once for all ranks (nil in RunRank).
	shared *memo
	// peersDone is closed once the other ranks have finished their part of
	// a failure check (nil in RunRank: the rank sleeps instead).
	peersDone <-chan struct{}
}

// gbuf is a buffer with guard bands: full is what Alloc returned, view the
// part between the bands.
type gbuf struct {
	e    *env
	full buffer.Buffer
	view buffer.Buffer
	n    int
}

func (e *env) alloc(n int) (*gbuf, error) {
	full, err := e.o.Alloc(e.c, n+2*guard)
	if err != nil {
		return nil, fmt.Errorf("alloc %d bytes: %w", n, err)
	}
	b := &gbuf{e: e, full: full, view: e.o.Slice(full, guard, guard+n), n: n}
	e.bufs = append(e.bufs, b)
	return b, b.set(nil)
}

// free releases every buffer of the case.
func (e *env) free() error {
	var errs []error
	for _, b := range e.bufs {
		errs = append(errs, e.o.Free(b.full))
	}
	e.bufs = nil
	return errors.Join(errs...)
}

// sub returns bytes [lo, hi) of the view.
func (b *gbuf) sub(lo, hi int) buffer.Buffer { return b.e.o.Slice(b.full, guard+lo, guard+hi) }

// set fills the view with data (the pattern where data is shorter) and the
// bands with the pattern.
func (b *gbuf) set(data []byte) error {
	full := make([]byte, b.n+2*guard)
	for i := range full {
		full[i] = guardByte(i)
	}
	copy(full[guard:guard+b.n], data)
	return b.e.o.Upload(b.full, full)
}

// get returns the bytes of the view, after checking the bands.
func (b *gbuf) get() ([]byte, error) {
	full := make([]byte, b.n+2*guard)
	if err := b.e.o.Download(b.full, full); err != nil {
		return nil, err
	}
	for i := range full {
		inView := i >= guard && i < guard+b.n
		if !inView && full[i] != guardByte(i) {
			return nil, fmt.Errorf("guard band byte %d of %d-byte buffer overwritten", i-guard, b.n)
		}
	}
	return full[guard : guard+b.n], nil
}

// expectUnchanged checks that the view still holds data.
func (b *gbuf) expectUnchanged(data []byte) error {
	got, err := b.get()
	if err != nil {
		return err
	}
	if string(got) != string(data) {
		return errors.New("input buffer was modified")
	}
	return nil
}

// memo computes values once per key for every rank of a Run case.
type memo struct {
	mu sync.Mutex
	m  map[string]*memoEntry
}

type memoEntry struct {
	once sync.Once
	v    any
}

// memo returns f(), computed once per key among the ranks that share e's
// memo (every call when there is none).
func (e *env) memo(key string, f func() any) any {
	if e.shared == nil {
		return f()
	}
	e.shared.mu.Lock()
	if e.shared.m == nil {
		e.shared.m = make(map[string]*memoEntry)
	}
	ent := e.shared.m[key]
	if ent == nil {
		ent = new(memoEntry)
		e.shared.m[key] = ent
	}
	e.shared.mu.Unlock()
	ent.once.Do(func() { ent.v = f() })
	return ent.v
}

// do starts ops as one group and waits.
func (e *env) do(ops ...collective.Op) error {
	return e.c.Start(ops...).Wait(e.ctx)
}

// fatal reports whether err leaves the communicator unusable, so that the
// remaining cases would only repeat it.
func fatal(err error) bool {
	return errors.Is(err, collective.ErrAborted) || errors.Is(err, collective.ErrClosed) ||
		errors.Is(err, collective.ErrPeerLost) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, context.Canceled)
}

// waitPeers returns once the other ranks are done with their part of a
// failure check: at once in Run, after d in RunRank.
func (e *env) waitPeers(d time.Duration) {
	if e.peersDone != nil {
		<-e.peersDone
		return
	}
	time.Sleep(d)
}
