package gpumodel

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/gemm"
)

// Phase is a class of the device work of a training step, a row of the
// profile a Profiler keeps (issue 37's table: where each step's time
// goes).
type Phase int

// The phases. Work is attributed to the phase marked last before it was
// queued on the model's stream.
const (
	PhaseEmbed        Phase = iota // token upload, embeddings and their gradients
	PhaseLayerNorm                 // LayerNorms, with the FP8 cast, bias and residual they fuse
	PhaseGELU                      // fc's bias, GELU and its FP8 cast
	PhaseBias                      // separate bias and residual passes
	PhaseQuantize                  // gemm's FP8 casts, amaxes and scales; FuseDY's one-pass cast
	PhaseTranspose                 // gemm's FP8 transposes and scale copies
	PhaseGEMM                      // the FP8 GEMMs (gemm.StageGEMM)
	PhaseAttention                 // attention forward
	PhaseAttentionBwd              // attention backward
	PhaseLayerNormBwd              // LayerNorm gradients (input, weight, bias)
	PhaseGELUBwd                   // GELU's gradient
	PhaseBiasGrad                  // bias gradients (column sums)
	PhaseHead                      // final LayerNorm, tied head and loss, forward and backward
	PhaseOptimizer                 // zeroing the gradients, what GradReady queues during backward, the optimizer's step (marked by the caller)
	numPhases
)

var phaseNames = [numPhases]string{"embedding", "layernorm", "gelu", "bias+residual", "quantize", "transpose", "fp8 gemm",
	"attention fwd", "attention bwd", "layernorm bwd", "gelu bwd", "bias grad", "head+loss", "optimizer"}

// String returns the phase's name in the profile table.
func (p Phase) String() string {
	if p >= 0 && p < numPhases {
		return phaseNames[p]
	}
	return fmt.Sprintf("Phase(%d)", int(p))
}

// phaseOf maps gemm's stages to phases.
func phaseOf(s gemm.Stage) Phase {
	switch s {
	case gemm.StageQuantize:
		return PhaseQuantize
	case gemm.StageTranspose:
		return PhaseTranspose
	}
	return PhaseGEMM
}

// Profiler measures the device time of a model's work by Phase with CUDA
// events: each Mark records an event on the model's stream, and the time
// between two consecutive events is the earlier one's phase's. Events
// cost about a microsecond of host time each and nothing measurable on the
// device; the bits computed do not change. Between two Collects the
// marks of one or more steps accumulate; a Profiler serves one stream and
// one goroutine.
type Profiler struct {
	d      *cuda.Device
	s      *cuda.Stream
	events []*cuda.Event // a pool, reused by every Collect
	phases []Phase       // the phase of each event recorded since the last Collect
	err    error         // the first failed Mark
	total  [numPhases]time.Duration
	steps  int
}

// NewProfiler returns a Profiler of the work queued on s.
func NewProfiler(d *cuda.Device, s *cuda.Stream) *Profiler { return &Profiler{d: d, s: s} }

// Mark attributes the work queued on the stream from now until the next
// Mark to phase ph. A failure is kept for Collect (Mark is called from
// places that cannot return it). On a nil Profiler it does nothing.
func (p *Profiler) Mark(ph Phase) {
	if p == nil || p.err != nil {
		return
	}
	i := len(p.phases)
	if i == len(p.events) {
		e, err := p.d.NewEvent(true)
		if err != nil {
			p.err = err
			return
		}
		p.events = append(p.events, e)
	}
	if err := p.events[i].Record(p.s); err != nil {
		p.err = err
		return
	}
	p.phases = append(p.phases, ph)
}

// Collect closes the marks recorded since the last Collect as one step,
// waits for the stream's work up to now and adds the time of each phase
// to the totals.
func (p *Profiler) Collect() error {
	if p.err != nil {
		return p.err
	}
	n := len(p.phases)
	if n == 0 {
		return errors.New("gpumodel: Profiler.Collect without a Mark")
	}
	p.Mark(PhaseOptimizer) // the end of the last phase; the phase is not used
	if p.err != nil {
		return p.err
	}
	if err := p.events[n].Synchronize(); err != nil {
		return err
	}
	d := make([]time.Duration, n)
	for i := range n {
		t, err := cuda.Elapsed(p.events[i], p.events[i+1])
		if err != nil {
			return err
		}
		d[i] = t
	}
	for ph, t := range attribute(p.phases[:n], d) {
		p.total[ph] += t
	}
	p.phases = p.phases[:0]
	p.steps++
	return nil
}

// attribute sums the intervals d by the phase of their start.
func attribute(phases []Phase, d []time.Duration) [numPhases]time.Duration {
	var t [numPhases]time.Duration
	for i, ph := range phases {
		t[ph] += d[i]
	}
	return t
}

// Totals returns each phase's device time summed over the collected
// steps, and their number.
func (p *Profiler) Totals() (total [numPhases]time.Duration, steps int) { return p.total, p.steps }

// Reset forgets the collected steps (the first, say, which includes the
// engine's autotuning); on a nil Profiler it does nothing.
func (p *Profiler) Reset() {
	if p != nil {
		p.total, p.steps = [numPhases]time.Duration{}, 0
	}
}

// WriteTable writes the mean time per step of each phase that took any,
// with its share of the sum, as a Markdown table.
func (p *Profiler) WriteTable(w io.Writer) error {
	if p.steps == 0 {
		return errors.New("gpumodel: profile table without a collected step")
	}
	var sum time.Duration
	for _, t := range p.total {
		sum += t
	}
	if _, err := fmt.Fprintf(w, "| phase | ms per step | share |\n|---|---|---|\n"); err != nil {
		return err
	}
	for ph, t := range p.total {
		if t == 0 {
			continue
		}
		ms := float64(t) / float64(time.Millisecond) / float64(p.steps)
		if _, err := fmt.Fprintf(w, "| %s | %.3f | %.1f%% |\n", Phase(ph), ms, 100*float64(t)/float64(sum)); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(w, "| all (%d steps) | %.3f | 100%% |\n", p.steps, float64(sum)/float64(time.Millisecond)/float64(p.steps))
	return err
}

// Close releases the events.
func (p *Profiler) Close() error {
	var errs []error
	for _, e := range p.events {
		errs = append(errs, e.Destroy())
	}
	p.events = nil
	return errors.Join(errs...)
}

// SetProfiler has the model (and its GEMM engine, gemm.Engine.SetTrace)
// mark its work by phase on p; nil stops it.
func (m *Model) SetProfiler(p *Profiler) {
	m.prof = p
	if p == nil {
		m.e.SetTrace(nil)
		return
	}
	m.e.SetTrace(func(s gemm.Stage) { p.Mark(phaseOf(s)) })
}

// mark marks phase ph on the model's profiler, if any.
func (m *Model) mark(ph Phase) { m.prof.Mark(ph) }
