package cpu

import (
	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
)

// AccumulateGrad implements backend.GradAccumulator.
func (c *Backend) AccumulateGrad(dst, src buffer.Buffer, dt buffer.DType, n int) error {
	d := hostBuf(dst)[:n*dt.Size()]
	collective.Reduce(d, [][]byte{hostBuf(src)[:n*dt.Size()], d}, dt, collective.Sum)
	return nil
}
