package optimizer

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
)

// MeanOverRanks returns the average of x over the ranks of the optimizer's
// communicator (a loss, say), through an 8-byte buffer of its backend, so
// that it works with device-memory communicators (NCCL) as with host ones.
// Every rank must call it together. The sum is collective.Reduce's Avg of
// float64 values, the same on every rank.
func (o *Optimizer) MeanOverRanks(ctx context.Context, x float64) (float64, error) {
	if err := o.usable(); err != nil {
		return 0, err
	}
	buf, err := o.backend.Alloc(8)
	if err != nil {
		return 0, err
	}
	defer o.backend.Free(buf)
	raw := binary.LittleEndian.AppendUint64(nil, math.Float64bits(x))
	if err := o.backend.Write(buf, 0, raw); err != nil {
		return 0, err
	}
	if err := collective.AllReduce(ctx, o.comm, buf, buf, buffer.Float64, collective.Avg); err != nil {
		return 0, fmt.Errorf("optimizer: mean over ranks: %w", err)
	}
	if err := o.backend.Read(raw, buf, 0); err != nil {
		return 0, err
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(raw)), nil
}
