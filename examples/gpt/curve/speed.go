package curve

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteSpeed prints the speed and memory of runs given in pairs (a run,
// then the reference it is compared with): tokens/s, MFU and peak memory
// of each, and the ratios of each pair. A run without a speed is an error.
func WriteSpeed(w io.Writer, runs []Curve) error {
	if len(runs)%2 != 0 {
		return fmt.Errorf("curve: %d runs: want pairs (a run, then its reference)", len(runs))
	}
	for _, r := range runs {
		if r.Speed == nil {
			return fmt.Errorf("curve: %s has no speed (fewer than %d steps?)", r.Name, untimed+1)
		}
	}
	const gib = 1 << 30
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "run\ttokens/s\tMFU\tpeak allocated\tpeak in use\t")
	for i := 0; i < len(runs); i += 2 {
		a, b := runs[i], runs[i+1]
		for _, r := range []Curve{a, b} {
			s := r.Speed
			fmt.Fprintf(tw, "%s\t%.0f\t%.1f%%\t%.2f GiB\t%.2f GiB\t\n", r.Name, s.TokensPerS, 100*s.MFU, float64(s.PeakAllocBytes)/gib, float64(s.PeakUsedBytes)/gib)
		}
		sa, sb := a.Speed, b.Speed
		fmt.Fprintf(tw, "%s / %s\t%.3fx\t%.3fx\t%.3fx\t%.3fx\t\n", a.Name, b.Name, sa.TokensPerS/sb.TokensPerS, sa.MFU/sb.MFU,
			float64(sa.PeakAllocBytes)/float64(sb.PeakAllocBytes), float64(sa.PeakUsedBytes)/float64(sb.PeakUsedBytes))
	}
	return tw.Flush()
}

// untimed is the number of first steps both sides leave out of the speed
// (examples/gpt's untimedSteps, torch_gpt.py's UNTIMED_STEPS).
const untimed = 3
