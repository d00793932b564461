package optimizer

import "github.com/distopt/distopt/optimizer/backend"

// batched runs fn inside the backend's Batch when it has one and when.
func (o *Optimizer) batched(when bool, fn func() error) error {
	if bt, ok := o.backend.(backend.Batcher); ok && when {
		return bt.Batch(fn)
	}
	return fn()
}
