package gpu

import (
	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer/backend"
)

// AccumulateGrad implements backend.GradAccumulator (sharded gradients
// over several micro-batches): one launch queued on the compute stream
// (kernels.Set.AccumulateGrad), dst[i] = src[i] + dst[i] for i < n in dt,
// the bits of collective.Reduce (Sum) (NaN payloads of float32 aside).
func (b *Backend) AccumulateGrad(dst, src buffer.Buffer, dt buffer.DType, n int) error {
	dd, sd := b.dbuf(dst), b.dbuf(src)
	checkRange("AccumulateGrad", dd, 0, n*dt.Size())
	checkRange("AccumulateGrad", sd, 0, n*dt.Size())
	return b.dev.Do(func() error { return b.ks.AccumulateGrad(b.s, ptrOf(dd), ptrOf(sd), n, isBF16(dt)) })
}

var _ backend.GradAccumulator = (*Backend)(nil)
