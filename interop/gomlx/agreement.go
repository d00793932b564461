package gomlxinterop

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/backend"
)

// describeSlot is the room for one parameter's description when ranks
// disagree; longer descriptions are cut.
const describeSlot = 256

// describe says what a rank must agree on about p: its name, the
// variable's shape, the layout, distopt's shape and the rules' marks.
func describe(p Param) string {
	return fmt.Sprintf("%s %v layout %v (distopt %v) high precision %t no decay %t group %d",
		p.Name, p.Var.Shape().Dimensions, p.Layout, p.Shape, p.HighPrecision, p.NoDecay, p.Group)
}

// checkParams compares every rank's parameters with rank 0's through comm
// and names the first that differs (optimizer.ErrMismatch). The optimizer
// compares its layouts too, but as digests, and misses a layout rule that
// keeps the shape (a square Dense kernel). One gather of 32 bytes a rank
// when they agree; the descriptions travel only when they do not.
func checkParams(ctx context.Context, comm collective.Communicator, be backend.Backend, params []Param) error {
	if comm.Size() == 1 {
		return nil
	}
	descs := make([]string, len(params))
	h := sha256.New()
	for i, p := range params {
		descs[i] = describe(p)
		fmt.Fprintln(h, descs[i])
	}
	head := binary.LittleEndian.AppendUint64(nil, uint64(len(params)))
	heads, err := gatherFixed(ctx, comm, be, h.Sum(head)[:32])
	if err != nil {
		return fmt.Errorf("gomlxinterop: comparing parameters: %w", err)
	}
	most, same := 0, true
	for _, x := range heads {
		most = max(most, int(binary.LittleEndian.Uint64(x)))
		same = same && bytes.Equal(x, heads[0])
	}
	if same {
		return nil
	}
	slots := make([]byte, most*describeSlot)
	for i, d := range descs {
		copy(slots[i*describeSlot:(i+1)*describeSlot], d)
	}
	all, err := gatherFixed(ctx, comm, be, slots)
	if err != nil {
		return fmt.Errorf("gomlxinterop: comparing parameters: %w", err)
	}
	return firstDifference(all)
}

// firstDifference returns the error naming the first parameter in which a
// rank's descriptions (slots of describeSlot bytes) differ from rank 0's.
func firstDifference(all [][]byte) error {
	slot := func(r, i int) string {
		s := all[r][i*describeSlot : (i+1)*describeSlot]
		if s = bytes.TrimRight(s, "\x00"); len(s) == 0 {
			return "none"
		}
		return fmt.Sprintf("%q", s)
	}
	for r := 1; r < len(all); r++ {
		for i := range len(all[r]) / describeSlot {
			if a, b := slot(0, i), slot(r, i); a != b {
				return fmt.Errorf("gomlxinterop: ranks build different models: parameter %d is %s on rank 0, %s on rank %d: %w", i, a, b, r, optimizer.ErrMismatch)
			}
		}
	}
	return fmt.Errorf("gomlxinterop: ranks build different models (descriptions longer than %d bytes differ): %w", describeSlot, optimizer.ErrMismatch)
}

// gatherFixed gathers mine, of the same length on every rank, from every
// rank through a buffer of be.
func gatherFixed(ctx context.Context, comm collective.Communicator, be backend.Backend, mine []byte) ([][]byte, error) {
	n, k, r := comm.Size(), len(mine), comm.Rank()
	dst, err := be.Alloc(n * k)
	if err != nil {
		return nil, err
	}
	defer be.Free(dst)
	if err := be.Write(dst, r*k, mine); err != nil {
		return nil, err
	}
	if err := collective.AllGather(ctx, comm, dst, dst.Slice(r*k, (r+1)*k)); err != nil {
		return nil, err
	}
	flat := make([]byte, n*k)
	if err := be.Read(flat, dst, 0); err != nil {
		return nil, err
	}
	out := make([][]byte, n)
	for i := range n {
		out[i] = flat[i*k : (i+1)*k]
	}
	return out, nil
}
