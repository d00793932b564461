package grpccomm

import (
	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
)

// reducer reduces this rank's block of a reduce-scatter (or part of an
// all-reduce) chunk by chunk, as the peers' contributions arrive. Chunk k
// is reduced once every peer's chunk k is in, with collective.Reduce over
// the contributions in rank order (this rank's read in place from own),
// into dst. At most len(slots) chunks are open at once: slot j serves the
// chunks j, j+W, j+2W, ... in turn, so a peer far ahead of the others waits
// instead of piling up frames. Fields are guarded by Comm.mu.
type reducer struct {
	dst, own []byte
	dt       buffer.DType
	op       collective.ReduceOp
	slots    []slot
	final    []bool // chunk k has been reduced into dst
}

// slot holds the contributions received for one chunk.
type slot struct {
	chunk  int        // the chunk this slot serves now
	frames []*inFrame // by rank; nil at this rank and for contributions not yet in
	count  int        // contributions in
}

func (c *Comm) newReducer(dst, own []byte, dt buffer.DType, op collective.ReduceOp) *reducer {
	r := &reducer{dst: dst, own: own, dt: dt, op: op, slots: make([]slot, c.cfg.Window)}
	for j := range r.slots {
		r.slots[j] = slot{chunk: j, frames: make([]*inFrame, c.size)}
	}
	r.final = make([]bool, (len(dst)+c.cfg.ChunkBytes-1)/c.cfg.ChunkBytes)
	return r
}

// deposit adds rank from's contribution f to chunk k of r, and reduces the
// chunk if it was the last one missing. It takes over f.
func (c *Comm) deposit(g *group, r *reducer, from, k int, f *inFrame) error {
	c.mu.Lock()
	sl := &r.slots[k%len(r.slots)]
	for sl.chunk != k {
		if c.failure != nil {
			c.mu.Unlock()
			f.free()
			return errStopped
		}
		c.cond.Wait()
	}
	sl.frames[from] = f
	sl.count++
	if sl.count < c.size-1 {
		c.mu.Unlock()
		return nil
	}
	frames := append([]*inFrame(nil), sl.frames...)
	clear(sl.frames)
	sl.count = 0
	ok := c.enterLocked(g)
	c.mu.Unlock()
	defer func() {
		for _, f := range frames {
			if f != nil {
				f.free()
			}
		}
	}()
	if !ok {
		return errStopped
	}
	lo := k * c.cfg.ChunkBytes
	hi := min(lo+c.cfg.ChunkBytes, len(r.dst))
	srcs := make([][]byte, c.size)
	for rank, f := range frames {
		if rank == c.rank {
			srcs[rank] = r.own[lo:hi]
		} else {
			srcs[rank] = f.payload
		}
	}
	collective.Reduce(r.dst[lo:hi], srcs, r.dt, r.op)
	c.mu.Lock()
	sl.chunk += len(r.slots)
	r.final[k] = true
	c.leaveLocked(g)
	c.cond.Broadcast()
	c.mu.Unlock()
	return nil
}

// waitFinal waits until chunk k of r has been reduced.
func (c *Comm) waitFinal(r *reducer, k int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for !r.final[k] {
		if c.failure != nil {
			return errStopped
		}
		c.cond.Wait()
	}
	return nil
}
