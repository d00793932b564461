package optimizer

// A rank that wrote no gradient since its last Step steps with zero
// gradients: Step zeroes its gradient buffers first. Without this, the
// buffers would still hold what the last step's reduce-scatter left
// there, and Step would apply it again. A write is a call of Grad (its view
// may be written at any time), SetGrad, GradReady or ZeroGrad. The rank
// still takes part in every collective, so the ranks never disagree on
// the step; its zeros lower the average like any rank's gradient would.

// markGrad records that a gradient may have been written since the last
// Step. SetGrad and GradReady call it concurrently.
func (o *Optimizer) markGrad() { o.gradWritten.Store(true) }

// zeroUnwritten zeroes the gradient buffers when no gradient was written
// since the last Step, and starts the next step's record. Sharded
// gradients need no zeroing: a pool buffer is zeroed when lent, and Step
// refuses parameters not declared ready.
func (o *Optimizer) zeroUnwritten() error {
	if o.gradWritten.Swap(false) || o.pool != nil {
		return nil
	}
	o.cfg.logger().Info("optimizer: no gradient written since the last step: stepping with zeros", "rank", o.rank, "step", o.step+1)
	for _, bk := range o.buckets {
		if bk.grad == nil {
			continue // lent gradients: BindGrads counts as a write, so none is unbound here
		}
		if err := o.backend.Zero(bk.grad, 0, bk.grad.Len()); err != nil {
			return o.fail(err)
		}
	}
	return nil
}
