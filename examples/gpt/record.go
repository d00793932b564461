package main

import (
	"github.com/distopt/distopt/examples/gpt/curve"
)

// untimedSteps are the first steps of a process left out of its speed
// (library loading, first launches, cuBLASLt's heuristics).
const untimedSteps = 3

// recorder keeps a run's loss curve and speed, and writes the curve (when
// path is not empty) after every evaluation and at the end: a run cut
// short leaves the curve of what it did.
type recorder struct {
	path          string
	c             curve.Curve
	steps         int     // steps recorded by this process
	seconds       float64 // of the timed steps
	tokens        float64 // of the timed steps
	flopsPerToken float64
	peakAlloc     int64
	peakUsed      int64
	gpus          int
}

// config records the run's settings that the curve carries: its head
// precision, and its validation sequences (windows of them per
// evaluation).
func (r *recorder) config(o options, windows int) {
	r.c.Eval = &curve.Eval{Windows: windows, Spread: o.evalSpread}
	r.c.Head = o.head.String()
}

// step records the training loss of step (from 1), which took seconds for
// tokens tokens.
func (r *recorder) step(step int, loss, seconds, tokens float64) {
	r.c.Train = append(r.c.Train, curve.Point{Step: step, Loss: loss})
	r.steps++
	if r.steps > untimedSteps {
		r.seconds += seconds
		r.tokens += tokens
	}
}

// memory records the device memory after a step.
func (r *recorder) memory(alloc, used int64) {
	r.peakAlloc, r.peakUsed = max(r.peakAlloc, alloc), max(r.peakUsed, used)
}

// valid records the validation loss after step and writes the curve.
func (r *recorder) valid(step int, loss float64) error {
	r.c.Valid = append(r.c.Valid, curve.Point{Step: step, Loss: loss})
	return r.write()
}

// write writes the curve, with the speed of the timed steps so far.
func (r *recorder) write() error {
	if r.path == "" {
		return nil
	}
	if r.seconds > 0 {
		tps := r.tokens / r.seconds
		r.c.Speed = &curve.Speed{TokensPerS: tps, MFU: tps * r.flopsPerToken / peakBF16 / float64(max(r.gpus, 1)),
			PeakAllocBytes: r.peakAlloc, PeakUsedBytes: r.peakUsed}
	}
	return curve.Write(r.path, r.c)
}
