// Package curve reads, writes and compares the loss curves of
// examples/gpt and of its PyTorch reference (scripts/gpt/torch_gpt.py):
// one JSON file per run,
//
//	{"name": "...", "train": [[step, loss], ...], "valid": [[step, loss], ...],
//	 "speed": {"tokens_per_s": ..., "mfu": ..., "peak_alloc_bytes": ..., "peak_used_bytes": ...},
//	 "eval": {"windows": ..., "spread": ...}, "head": "..."}
//
// with steps counted from 1 and losses as written by the run (Go's and
// Python's JSON encoders both write float64 values that read back bit for
// bit, which the resume check relies on).
package curve

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
)

// Point is one loss of a run, after optimizer step Step (from 1). In JSON
// it is the array [step, loss].
type Point struct {
	Step int
	Loss float64
}

// MarshalJSON writes [step, loss]; a loss that is not finite (JSON has
// no NaN or infinities) is written as the string "NaN", "+Inf" or "-Inf",
// as scripts/gpt/torch_gpt.py writes it, so that a diverged run still
// leaves its curve.
func (p Point) MarshalJSON() ([]byte, error) {
	if math.IsNaN(p.Loss) || math.IsInf(p.Loss, 0) {
		return json.Marshal([2]any{p.Step, strconv.FormatFloat(p.Loss, 'g', -1, 64)})
	}
	return json.Marshal([2]any{p.Step, p.Loss})
}

// UnmarshalJSON reads [step, loss], the loss a number or one of the
// strings MarshalJSON writes for non-finite values.
func (p *Point) UnmarshalJSON(b []byte) error {
	var a []json.RawMessage
	if err := json.Unmarshal(b, &a); err != nil {
		return fmt.Errorf("curve: a point must be [step, loss]: %w", err)
	}
	var step float64
	if len(a) != 2 || json.Unmarshal(a[0], &step) != nil || step != float64(int(step)) || step < 1 {
		return fmt.Errorf("curve: point %s: want [step, loss] with an integer step from 1", b)
	}
	var loss float64
	if err := json.Unmarshal(a[1], &loss); err != nil {
		var s string
		if json.Unmarshal(a[1], &s) != nil || (s != "NaN" && s != "+Inf" && s != "-Inf") {
			return fmt.Errorf("curve: point %s: the loss must be a number, \"NaN\", \"+Inf\" or \"-Inf\"", b)
		}
		loss, _ = strconv.ParseFloat(s, 64)
	}
	p.Step, p.Loss = int(step), loss
	return nil
}

// Speed is a run's throughput and memory.
type Speed struct {
	// TokensPerS is the training tokens per second over the timed steps
	// (all but the first few, evaluations and checkpoints left out), over
	// all ranks; MFU the model FLOPs utilisation per GPU, in [0, 1]:
	// TokensPerS x model.Config.FlopsPerToken / (GPUs x 989e12).
	TokensPerS float64 `json:"tokens_per_s"`
	MFU        float64 `json:"mfu"`
	// PeakAllocBytes is the most device memory the run allocated at once
	// (PyTorch: torch.cuda.max_memory_allocated; distopt: the allocations
	// through its cuda.Device, read at each step's end); PeakUsedBytes the
	// most the driver reported in use on the device (cuMemGetInfo; every
	// process on the device included).
	PeakAllocBytes int64 `json:"peak_alloc_bytes"`
	PeakUsedBytes  int64 `json:"peak_used_bytes"`
}

// Eval is how a run chose its validation sequences.
type Eval struct {
	// Windows is the number of sequences of each evaluation, Spread
	// whether they are evenly strided over the validation split
	// (data.EvalWindows) rather than its first ones.
	Windows int  `json:"windows"`
	Spread  bool `json:"spread"`
}

// Curve is one run. Eval and Head are absent from the files of runs made
// before they were recorded.
type Curve struct {
	Name  string  `json:"name,omitempty"`
	Train []Point `json:"train"`
	Valid []Point `json:"valid"`
	Speed *Speed  `json:"speed,omitempty"`
	// Eval is the run's validation sequences: Check refuses to compare
	// runs that both record theirs when they differ.
	Eval *Eval `json:"eval,omitempty"`
	// Head is examples/gpt's -head-precision (fp32 or bf16); PyTorch's
	// runs record none.
	Head string `json:"head,omitempty"`
}

// Read reads a curve file; its steps must increase.
func Read(path string) (Curve, error) {
	var c Curve
	b, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("curve: %w", err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("curve: %s: %w", path, err)
	}
	for _, s := range [][]Point{c.Train, c.Valid} {
		for i := 1; i < len(s); i++ {
			if s[i].Step <= s[i-1].Step {
				return c, fmt.Errorf("curve: %s: step %d after step %d: steps must increase", path, s[i].Step, s[i-1].Step)
			}
		}
	}
	if c.Name == "" {
		c.Name = filepath.Base(path)
	}
	return c, nil
}

// Write writes c to path through a temporary file, so that a reader (or a
// run killed while writing) never sees half a file.
func Write(path string, c Curve) error {
	b, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("curve: %w", err)
	}
	return writeFile(path, b)
}

// writeFile writes b and a newline to path through a temporary file
// renamed over it, so that a failed write leaves the old file whole.
func writeFile(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("curve: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("curve: %w", err)
	}
	return nil
}
