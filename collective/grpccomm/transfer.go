package grpccomm

import (
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
)

// Algorithms (every transfer is direct, rank to rank, in chunks of at most
// Config.ChunkBytes; s is the sender, d the receiver):
//
//   - all-gather: s sends its src to every d, which writes it at s's block.
//   - reduce-scatter: s sends block d of its src to d; d reduces each chunk
//     of its block over the contributions of ranks 0..n-1 (its own read in
//     place) with collective.Reduce as soon as all have arrived.
//   - all-reduce: the buffer is split into n parts by elements; phase 1 is a
//     reduce-scatter of the parts, phase 2 sends each reduced chunk of part
//     s to every d as soon as it is final.
//   - all-to-all: s sends block d of its src to d, which writes it at
//     block s of its dst.
//   - broadcast: the root sends its buffer to every d.
//   - barrier: the descriptors alone.
//
// Before its data, every op sends one descriptor frame to every peer, so
// that ops that differ between ranks are caught.
const (
	phaseData   = 1 // contributions: all-gather, reduce-scatter, broadcast, all-reduce phase 1
	phaseResult = 2 // all-reduce phase 2: reduced parts
)

// opState is one op of a group, with its buffers as byte slices.
type opState struct {
	collective.Op
	dst, src []byte
	size     int      // the op's size as descriptors state it (bytes)
	unit     int      // all-gather, reduce-scatter: bytes per rank
	parts    []int    // all-reduce: byte offset of each rank's part, and the end
	red      *reducer // reduce-scatter, all-reduce (size > 1)
}

// part returns the byte range of rank p's part of an all-reduce.
func (o *opState) part(p int) (lo, hi int) { return o.parts[p], o.parts[p+1] }

// descHeader is the descriptor of op index i of g.
func descHeader(g *group, i int) header {
	o := g.ops[i]
	h := header{typ: frameDesc, kind: uint8(o.Kind), seq: g.seq, index: uint32(i), count: uint32(len(g.ops)), total: uint64(o.size)}
	switch o.Kind {
	case collective.OpReduceScatter, collective.OpAllReduce:
		h.dtype, h.reduce = uint8(o.DType), uint8(o.Reduce)
	case collective.OpBroadcast:
		h.root = uint32(o.Root)
	}
	return h
}

// describe says what a descriptor stands for, for error messages.
func describe(h *header) string {
	s := fmt.Sprintf("op %d of %d in group %d: %s of %d bytes", h.index+1, h.count, h.seq, collective.OpKind(h.kind), h.total)
	switch collective.OpKind(h.kind) {
	case collective.OpReduceScatter, collective.OpAllReduce:
		s += fmt.Sprintf(" (%s %s)", buffer.DType(h.dtype), collective.ReduceOp(h.reduce))
	case collective.OpBroadcast:
		s += fmt.Sprintf(" from root %d", h.root)
	}
	return s
}

// sendLoop sends this rank's frames for p, group after group. After a
// graceful Close it ends the stream.
func (c *Comm) sendLoop(p *peer) {
	for seq := uint64(0); ; seq++ {
		g := c.nextGroup(seq, nil)
		if g == nil {
			break
		}
		if err := c.sendGroup(g, p); err != nil {
			if !errors.Is(err, errStopped) {
				<-p.drained // the watcher has the status that tells why
				c.mu.Lock()
				endErr := p.gone
				c.mu.Unlock()
				if endErr != "" {
					c.fail(&failure{rank: p.rank, msg: endErr, errs: []error{collective.ErrPeerLost}})
				} else {
					c.peerLost(p, err)
				}
			}
			break
		}
		c.partDone(g)
	}
	c.mu.Lock()
	graceful := c.failure != nil && c.failure.graceful
	c.mu.Unlock()
	if graceful {
		_ = p.out.CloseSend()
	}
}

// sendGroup sends g's frames for p.
func (c *Comm) sendGroup(g *group, p *peer) error {
	for i, o := range g.ops {
		h := descHeader(g, i)
		if err := c.send(g, p, &h, nil); err != nil {
			return err
		}
		var err error
		switch o.Kind {
		case collective.OpAllGather:
			err = c.sendBytes(g, i, p, phaseData, o.src, nil)
		case collective.OpReduceScatter, collective.OpAllToAll:
			err = c.sendBytes(g, i, p, phaseData, o.src[p.rank*o.unit:(p.rank+1)*o.unit], nil)
		case collective.OpAllReduce:
			lo, hi := o.part(p.rank)
			if err = c.sendBytes(g, i, p, phaseData, o.src[lo:hi], nil); err == nil {
				lo, hi = o.part(c.rank)
				err = c.sendBytes(g, i, p, phaseResult, o.dst[lo:hi], o.red)
			}
		case collective.OpBroadcast:
			if c.rank == o.Root {
				err = c.sendBytes(g, i, p, phaseData, o.dst, nil)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// sendBytes sends data to p in chunks; with final set, each chunk once the
// reduction final has finished it.
func (c *Comm) sendBytes(g *group, i int, p *peer, phase uint8, data []byte, final *reducer) error {
	for k, lo := 0, 0; lo < len(data); k, lo = k+1, lo+c.cfg.ChunkBytes {
		if final != nil {
			if err := c.waitFinal(final, k); err != nil {
				return err
			}
		}
		h := header{typ: frameData, seq: g.seq, index: uint32(i), phase: phase, chunk: uint32(k)}
		if err := c.send(g, p, &h, data[lo:min(lo+c.cfg.ChunkBytes, len(data))]); err != nil {
			return err
		}
	}
	return nil
}

// send sends one frame to p; payload is read (copied) before the network
// is touched.
func (c *Comm) send(g *group, p *peer, h *header, payload []byte) error {
	if !c.enter(g) {
		return errStopped
	}
	f := newOutFrame(h, payload)
	c.leave(g)
	return p.out.SendMsg(f)
}

// watch waits for the end of this rank's stream to p, which only the peer
// ends: OK when it closed, Aborted when it aborted (the status says why),
// or an error when the link broke.
func (c *Comm) watch(p *peer) {
	var f inFrame
	err := p.out.RecvMsg(&f)
	f.free()
	if err == nil {
		err = fmt.Errorf("unexpected frame of type %d", f.typ)
	}
	if err == io.EOF {
		c.peerGone(p, "closed its communicator")
	} else {
		c.peerLost(p, err)
	}
	close(p.drained)
}

// serveFrames is the handler of a peer's stream to this rank: it reads the
// peer's frames, group after group, and stores or reduces their data.
func (c *Comm) serveFrames(stream grpc.ServerStream) error {
	p, err := c.accept(stream)
	if err != nil {
		return err
	}
	frames := make(chan *inFrame, 1)
	c.wg.Go(func() { c.read(p, stream, frames) })
	for seq := uint64(0); ; seq++ {
		g := c.nextGroup(seq, p)
		if g == nil {
			break
		}
		if err := c.recvGroup(g, p, frames); err != nil {
			var f *failure
			if errors.As(err, &f) {
				c.fail(f)
			}
			break
		}
		c.partDone(g)
	}
	return c.endStatus()
}

// read receives p's frames for serveFrames. At the end of the stream it
// records why p will send no more and closes frames.
func (c *Comm) read(p *peer, stream grpc.ServerStream, frames chan<- *inFrame) {
	defer close(frames)
	for {
		f := new(inFrame)
		if err := stream.RecvMsg(f); err != nil {
			if err == io.EOF {
				c.peerGone(p, "closed its communicator")
				return
			}
			// A peer that aborts ends this stream and, in the status of
			// the stream p.out, says why and whom it blames: give the
			// watcher a moment to report that first.
			t := time.NewTimer(time.Second)
			select {
			case <-p.drained:
			case <-c.dead:
			case <-t.C:
			}
			t.Stop()
			c.peerLost(p, err)
			return
		}
		p.heard.Store(time.Now().UnixNano())
		select {
		case frames <- f:
		case <-c.dead:
			f.free()
			return
		}
	}
}

// next returns p's next frame; a *failure if p has gone, errStopped if the
// communicator failed.
func (c *Comm) next(p *peer, frames <-chan *inFrame) (*inFrame, error) {
	select {
	case f, ok := <-frames:
		if ok {
			return f, nil
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if p.gone != "" && c.failure == nil {
			return nil, &failure{rank: p.rank, msg: p.gone, errs: []error{collective.ErrPeerLost}}
		}
	case <-c.dead:
	}
	return nil, errStopped
}

// recvGroup receives p's frames of g.
func (c *Comm) recvGroup(g *group, p *peer, frames <-chan *inFrame) error {
	for i, o := range g.ops {
		f, err := c.next(p, frames)
		if err != nil {
			return err
		}
		f.free()
		if want := descHeader(g, i); f.header != want {
			return &failure{rank: p.rank, msg: fmt.Sprintf("mismatched ops: rank %d started %s, rank %d %s", p.rank, describe(&f.header), c.rank, describe(&want)),
				errs: []error{collective.ErrInvalid}}
		}
		store := func(off int) func(k, lo int, f *inFrame) error {
			return func(_, lo int, f *inFrame) error {
				defer f.free()
				if !c.enter(g) {
					return errStopped
				}
				copy(o.dst[off+lo:], f.payload)
				c.leave(g)
				return nil
			}
		}
		reduce := func(k, _ int, f *inFrame) error { return c.deposit(g, o.red, p.rank, k, f) }
		switch o.Kind {
		case collective.OpAllGather, collective.OpAllToAll:
			err = c.recvBytes(g, i, p, frames, phaseData, o.unit, store(p.rank*o.unit))
		case collective.OpReduceScatter:
			err = c.recvBytes(g, i, p, frames, phaseData, o.unit, reduce)
		case collective.OpAllReduce:
			lo, hi := o.part(c.rank)
			if err = c.recvBytes(g, i, p, frames, phaseData, hi-lo, reduce); err == nil {
				lo, hi = o.part(p.rank)
				err = c.recvBytes(g, i, p, frames, phaseResult, hi-lo, store(lo))
			}
		case collective.OpBroadcast:
			if p.rank == o.Root {
				err = c.recvBytes(g, i, p, frames, phaseData, len(o.dst), store(0))
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// recvBytes receives n bytes from p in chunks and passes each chunk k, at
// byte offset lo, to use, which takes over the frame.
func (c *Comm) recvBytes(g *group, i int, p *peer, frames <-chan *inFrame, phase uint8, n int, use func(k, lo int, f *inFrame) error) error {
	for k, lo := 0, 0; lo < n; k, lo = k+1, lo+c.cfg.ChunkBytes {
		f, err := c.next(p, frames)
		if err != nil {
			return err
		}
		want := header{typ: frameData, seq: g.seq, index: uint32(i), phase: phase, chunk: uint32(k)}
		if f.header != want || len(f.payload) != min(c.cfg.ChunkBytes, n-lo) {
			f.free()
			return &failure{rank: p.rank, msg: fmt.Sprintf("unexpected frame from rank %d in %s (op %d of group %d, chunk %d)", p.rank, g.name, i+1, g.seq, k),
				errs: []error{collective.ErrInvalid}}
		}
		if err := use(k, lo, f); err != nil {
			return err
		}
	}
	return nil
}
