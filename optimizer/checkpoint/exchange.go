package checkpoint

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer/backend"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/optimizer"
)

// group is the set of ranks taking part in a save or load: the
// communicator, and the optimizer's backend, whose buffers the communicator
// takes.
type group struct {
	comm collective.Communicator
	be   backend.Backend
}

func newGroup(o *optimizer.Optimizer, comm collective.Communicator) (group, error) {
	g := group{comm: comm, be: o.Backend()}
	if comm.Size() != o.Layout().World || comm.Memory() != g.be.Memory() {
		return g, fmt.Errorf("checkpoint: communicator of %d ranks over %s memory, optimizer of %d ranks over %s memory: %w",
			comm.Size(), comm.Memory(), o.Layout().World, g.be.Memory(), ErrComm)
	}
	return g, nil
}

// gather all-gathers one byte string of any length from every rank: the
// lengths first, then the strings padded to the longest.
func (g group) gather(ctx context.Context, data []byte) ([][]byte, error) {
	n := g.comm.Size()
	lens, err := g.gatherFixed(ctx, binary.LittleEndian.AppendUint64(nil, uint64(len(data))))
	if err != nil {
		return nil, err
	}
	longest := 0
	size := make([]int, n)
	for r := range n {
		size[r] = int(binary.LittleEndian.Uint64(lens[8*r:]))
		longest = max(longest, size[r])
	}
	if longest == 0 {
		return make([][]byte, n), nil
	}
	padded := make([]byte, longest)
	copy(padded, data)
	all, err := g.gatherFixed(ctx, padded)
	if err != nil {
		return nil, err
	}
	out := make([][]byte, n)
	for r := range n {
		out[r] = all[r*longest : r*longest+size[r]]
	}
	return out, nil
}

// gatherFixed all-gathers len(data) bytes, the same length on every rank.
func (g group) gatherFixed(ctx context.Context, data []byte) ([]byte, error) {
	src, err := g.be.Alloc(len(data))
	if err != nil {
		return nil, err
	}
	defer g.be.Free(src)
	dst, err := g.be.Alloc(g.comm.Size() * len(data))
	if err != nil {
		return nil, err
	}
	defer g.be.Free(dst)
	if err := g.be.Write(src, 0, data); err != nil {
		return nil, err
	}
	if err := collective.AllGather(ctx, g.comm, dst, src); err != nil {
		return nil, err
	}
	out := make([]byte, dst.Len())
	return out, g.be.Read(out, dst, 0)
}

// maxUint32 reduces x over the ranks with MAX, in place.
func (g group) maxUint32(ctx context.Context, x []uint32) error {
	if len(x) == 0 {
		return nil
	}
	buf, err := g.be.Alloc(4 * len(x))
	if err != nil {
		return err
	}
	defer g.be.Free(buf)
	if err := g.be.Write(buf, 0, collective.ToBytes(x)); err != nil {
		return err
	}
	if err := collective.AllReduce(ctx, g.comm, buf, buf, buffer.Uint32, collective.Max); err != nil {
		return err
	}
	raw := make([]byte, 4*len(x))
	if err := g.be.Read(raw, buf, 0); err != nil {
		return err
	}
	copy(x, collective.FromBytes[uint32](raw))
	return nil
}

// report is what one rank tells the others at a synchronisation point.
type report struct {
	Code  int    `json:"code"` // 1 + index into codes of the error; -1 other error; 0 none
	Err   string `json:"err,omitempty"`
	Value string `json:"value,omitempty"`
}

// agree is a synchronisation point of every rank: each tells the others
// whether its part succeeded (local) and a value. When every rank
// succeeded it returns the values by rank. Otherwise every rank returns an
// error: its own if it failed, else the report of the lowest failed rank,
// wrapping the same sentinel (see codes) or ErrRemote.
func (g group) agree(ctx context.Context, local error, value string) ([]string, error) {
	rep := report{Value: value}
	if local != nil {
		rep.Code, rep.Err = -1, local.Error()
		for i, c := range codes {
			if errors.Is(local, c) {
				rep.Code = i + 1
				break
			}
		}
	}
	mine, _ := json.Marshal(rep) // a struct of strings and ints always marshals
	all, err := g.gather(ctx, mine)
	if err != nil {
		if local != nil {
			return nil, local
		}
		return nil, fmt.Errorf("checkpoint: exchanging status with the other ranks: %w", err)
	}
	values := make([]string, len(all))
	for r, b := range all {
		var rr report
		if err := json.Unmarshal(b, &rr); err != nil {
			return nil, fmt.Errorf("checkpoint: rank %d sent a malformed status: %v: %w", r, err, ErrRemote)
		}
		if local != nil {
			continue
		}
		if rr.Code != 0 {
			sentinel := ErrRemote
			if rr.Code > 0 && rr.Code <= len(codes) {
				sentinel = codes[rr.Code-1]
			}
			return nil, fmt.Errorf("checkpoint: rank %d failed: %s: %w", r, rr.Err, sentinel)
		}
		values[r] = rr.Value
	}
	if local != nil {
		return nil, local
	}
	return values, nil
}
