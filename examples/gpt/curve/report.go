package curve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// Fastest returns the run of alts with the most tokens per second: the
// reference a run is compared with when the reference was measured in
// several configurations (PyTorch with each of its attention backends).
// A run without a speed is an error.
func Fastest(alts []Curve) (Curve, error) {
	if len(alts) == 0 {
		return Curve{}, fmt.Errorf("curve: no reference runs")
	}
	best := -1
	for i, c := range alts {
		if c.Speed == nil {
			return Curve{}, fmt.Errorf("curve: %s has no speed (fewer than %d steps?)", c.Name, untimed+1)
		}
		if best < 0 || c.Speed.TokensPerS > alts[best].Speed.TokensPerS {
			best = i
		}
	}
	return alts[best], nil
}

// SpeedRow is one comparison of a speed report: a run, the fastest of its
// references, and the ratios run / reference.
type SpeedRow struct {
	Run       string  `json:"run"`
	Reference string  `json:"reference"`
	RunSpeed  Speed   `json:"run_speed"`
	RefSpeed  Speed   `json:"reference_speed"`
	Tokens    float64 `json:"tokens_per_s_ratio"`
	MFU       float64 `json:"mfu_ratio"`
	PeakAlloc float64 `json:"peak_alloc_ratio"`
	// Others names the references measured and not chosen, with their
	// tokens per second.
	Others map[string]float64 `json:"other_references,omitempty"`
}

// SpeedReport is the file `curves -speed -json` writes
// (examples/gpt/results/speed.json): the comparisons of one call, with
// when and at which commit they were measured, and on what.
type SpeedReport struct {
	Date    string     `json:"date"`
	Commit  string     `json:"commit,omitempty"`
	Machine string     `json:"machine,omitempty"`
	Rows    []SpeedRow `json:"rows"`
}

// NewSpeedRow compares run with the fastest of refs.
func NewSpeedRow(run Curve, refs []Curve) (SpeedRow, error) {
	if run.Speed == nil {
		return SpeedRow{}, fmt.Errorf("curve: %s has no speed (fewer than %d steps?)", run.Name, untimed+1)
	}
	ref, err := Fastest(refs)
	if err != nil {
		return SpeedRow{}, err
	}
	a, b := *run.Speed, *ref.Speed
	row := SpeedRow{Run: run.Name, Reference: ref.Name, RunSpeed: a, RefSpeed: b,
		Tokens: a.TokensPerS / b.TokensPerS, MFU: a.MFU / b.MFU,
		PeakAlloc: float64(a.PeakAllocBytes) / float64(b.PeakAllocBytes)}
	for _, o := range refs {
		if o.Name != ref.Name {
			if row.Others == nil {
				row.Others = map[string]float64{}
			}
			row.Others[o.Name] = o.Speed.TokensPerS
		}
	}
	return row, nil
}

// Write writes r as indented JSON into path, through a temporary file
// renamed over it, so that a failed write leaves the old report whole.
func (r SpeedReport) Write(path string) error {
	if r.Date == "" {
		r.Date = time.Now().UTC().Format(time.DateOnly)
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return writeFile(path, b)
}

// ReadSpeedReport reads a report written by Write.
func ReadSpeedReport(path string) (SpeedReport, error) {
	var r SpeedReport
	b, err := os.ReadFile(path)
	if err != nil {
		return r, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return r, fmt.Errorf("curve: %s: %w", path, err)
	}
	return r, nil
}
