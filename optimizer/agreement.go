package optimizer

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/shard"
)

// checkAgreement exchanges the layout and configuration fields of every rank
// through the communicator and fails with ErrMismatch, naming the first rank
// and the fields that differ from rank 0, when they do not all agree.
func (o *Optimizer) checkAgreement(ctx context.Context) error {
	fields := append(o.layout.Fields(), o.cfg.fields()...)
	var storeErr error
	if o.cfg.Store != nil {
		storeErr = o.cfg.Store.CheckAgreement(ctx, "distopt/optimizer/fingerprint", shard.FingerprintFields(fields))
		if storeErr != nil && ctx.Err() != nil {
			return fmt.Errorf("optimizer: comparing fingerprints through the store: %w", storeErr)
		}
	}
	if err := o.exchangeFields(ctx, fields); err != nil {
		return err
	}
	if storeErr != nil {
		return fmt.Errorf("optimizer: fingerprints differ through the store: %w: %w", storeErr, ErrMismatch)
	}
	return nil
}

// exchangeFields compares every rank's fields with rank 0's through the
// communicator.
func (o *Optimizer) exchangeFields(ctx context.Context, fields []shard.Field) error {
	mine := shard.EncodeFields(fields)
	all, err := o.allGatherBytes(ctx, mine)
	if err != nil {
		return fmt.Errorf("optimizer: exchanging configuration: %w", err)
	}
	ref, err := shard.DecodeFields(all[0])
	if err != nil {
		return err
	}
	for r := 1; r < len(all); r++ {
		got, err := shard.DecodeFields(all[r])
		if err != nil {
			return err
		}
		if d := shard.DiffFields(ref, got); d != "" {
			return fmt.Errorf("optimizer: rank %d differs from rank 0 in %s: %w", r, d, ErrMismatch)
		}
	}
	return nil
}

// allGatherBytes gathers a variable-length byte string from every rank.
func (o *Optimizer) allGatherBytes(ctx context.Context, data []byte) ([][]byte, error) {
	n := o.comm.Size()
	gather := func(payload []byte) ([]byte, error) {
		k := len(payload)
		dst, err := o.backend.Alloc(n * k)
		if err != nil {
			return nil, err
		}
		defer o.backend.Free(dst)
		r := o.comm.Rank()
		if err := o.backend.Write(dst, r*k, payload); err != nil {
			return nil, err
		}
		if err := collective.AllGather(ctx, o.comm, dst, dst.Slice(r*k, (r+1)*k)); err != nil {
			return nil, err
		}
		out := make([]byte, n*k)
		return out, o.backend.Read(out, dst, 0)
	}
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(len(data)))
	lens, err := gather(lenBuf[:])
	if err != nil {
		return nil, err
	}
	longest := 0
	for r := range n {
		longest = max(longest, int(binary.LittleEndian.Uint64(lens[8*r:])))
	}
	padded := make([]byte, longest)
	copy(padded, data)
	all, err := gather(padded)
	if err != nil {
		return nil, err
	}
	out := make([][]byte, n)
	for r := range n {
		l := int(binary.LittleEndian.Uint64(lens[8*r:]))
		out[r] = all[r*longest : r*longest+l]
	}
	return out, nil
}
