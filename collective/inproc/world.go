package inproc

import (
	"sync"

	"github.com/distopt/distopt/collective"
)

// world is the state the ranks of one New share.
type world struct {
	n int

	mu     sync.Mutex
	rounds map[uint64]*round // rounds not yet taken by the executor
	abort  *abortInfo        // first abort; nil while the world runs

	kick   chan struct{} // a round may be complete
	abortc chan struct{} // closed on abort
	exited chan struct{} // closed when run returns
}

// round is the k-th group of every rank.
type round struct {
	ops     [][]collective.Op // by rank
	arrived int               // ranks that started their group (guarded by world.mu)

	// Written before done is closed.
	done    chan struct{}
	aborted bool  // the world was aborted before the round completed
	err     error // a failure common to every rank (mismatched groups)
}

// doAbort ends the world, once: rounds still waiting for ranks fail at
// once, the running one (no longer in w.rounds) at its next chunk.
func (w *world) doAbort(a *abortInfo) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.abort != nil {
		return
	}
	w.abort = a
	close(w.abortc)
	for seq, rd := range w.rounds {
		rd.aborted = true
		close(rd.done)
		delete(w.rounds, seq)
	}
}

// run executes the rounds in sequence order until the world is aborted.
func (w *world) run() {
	defer close(w.exited)
	var next uint64
	for {
		w.mu.Lock()
		if w.abort != nil {
			w.mu.Unlock()
			return
		}
		rd := w.rounds[next]
		if rd != nil && rd.arrived == w.n {
			delete(w.rounds, next)
			w.mu.Unlock()
			next++
			if !w.execute(rd) {
				rd.aborted = true
			}
			close(rd.done)
			continue
		}
		w.mu.Unlock()
		select {
		case <-w.kick:
		case <-w.abortc:
		}
	}
}
