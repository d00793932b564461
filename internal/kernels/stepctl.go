package kernels

import "github.com/distopt/distopt/internal/cuda"

// kernelStepControl is the kernel of stepctl.cu.
const kernelStepControl = "step_control"

// StepControl queues on s the step's decision (one thread): the control
// block at ctl (optimizer/backend.Control's layout, ControlBytes bytes) is
// advanced as backend.Control.Advance does over the reduced gradient
// statistics at stats (backend.StatsLen int64 values), bit for bit.
func (k *Set) StepControl(s *cuda.Stream, ctl, stats cuda.DevicePtr) error {
	return s.Launch(k.function(kernelStepControl), cuda.Dim3{X: 1}, cuda.Dim3{X: 1}, 0, new(cuda.Args).Ptr(ctl).Ptr(stats))
}
