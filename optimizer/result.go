package optimizer

import "time"

// Timings holds the phase durations of a step, as the host saw them. In a
// step whose gradients were declared ready (GradReady), ReduceScatter is
// only the wait for the reduce-scatters already in flight. Each bucket's
// all-gather starts right after its cast is queued, so Cast includes
// starting the gathers; AllGather is Step's wait for them (0 in StepAsync,
// which returns with them in flight).
type Timings struct {
	ReduceScatter, Norm, Update, AmaxReduce, Cast, AllGather time.Duration
}

// StepResult reports one step.
type StepResult struct {
	Step      int     // steps taken so far, this one included when not skipped
	Skipped   bool    // the gradients were not finite: nothing was updated
	Reason    string  // why the step was skipped
	GradNorm  float64 // global gradient norm before clipping (after unscaling)
	ClipCoef  float64 // factor the gradients were multiplied by (1: no clipping)
	LossScale float64 // the loss scale in effect for this step's gradients
	// Pending is set by a StepAsync whose decision stays on the device
	// (see AsyncReader): Skipped, Reason, GradNorm, ClipCoef and LossScale
	// are not known yet, and Step counts the step as taken. LastResult
	// returns them once the device has decided.
	Pending bool
	Timings Timings
}

// since returns the time from *t0 to now and moves *t0 to now.
func since(t0 *time.Time) time.Duration {
	now := time.Now()
	d := now.Sub(*t0)
	*t0 = now
	return d
}
