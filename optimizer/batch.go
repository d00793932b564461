package optimizer

// Batcher is an optional Backend interface for backends whose calls cost a
// hand-over each (optimizer/gpu: every call into the CUDA driver runs on
// the device's own OS thread). Batch runs fn, which calls the backend and
// the communicator many times, so that its calls cost one hand-over in
// all: StepAsync enqueues the phases of a step whose decision stays on the
// device (AsyncReader) inside one Batch. fn may wait for collective work
// (Work.Wait, DeviceOrderer.After); the communicator must then make
// progress without the backend's thread (collective/nccl drives NCCL from
// a thread of its own).
type Batcher interface {
	Batch(fn func() error) error
}

// batched runs fn inside the backend's Batch when it has one and when.
func (o *Optimizer) batched(when bool, fn func() error) error {
	if bt, ok := o.be.(Batcher); ok && when {
		return bt.Batch(fn)
	}
	return fn()
}
