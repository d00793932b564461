package cpu

import (
	"github.com/distopt/distopt/collective"
)

// AccumulateGrad implements backend.GradAccumulator.
func (c *Backend) AccumulateGrad(dst, src collective.Buffer, dt collective.DType, n int) error {
	d := hostBuf(dst)[:n*dt.Size()]
	collective.Reduce(d, [][]byte{hostBuf(src)[:n*dt.Size()], d}, dt, collective.Sum)
	return nil
}
