package curve

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteSpeed prints rows as a table: tokens/s, MFU and peak memory of each
// run and of its reference, and the ratios of each pair.
func WriteSpeed(w io.Writer, rows []SpeedRow) error {
	const gib = 1 << 30
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "run\ttokens/s\tMFU\tpeak allocated\tpeak in use\t")
	for _, r := range rows {
		for _, x := range []struct {
			name string
			s    Speed
		}{{r.Run, r.RunSpeed}, {r.Reference, r.RefSpeed}} {
			fmt.Fprintf(tw, "%s\t%.0f\t%.1f%%\t%.2f GiB\t%.2f GiB\t\n", x.name, x.s.TokensPerS, 100*x.s.MFU,
				float64(x.s.PeakAllocBytes)/gib, float64(x.s.PeakUsedBytes)/gib)
		}
		fmt.Fprintf(tw, "%s / %s\t%.3fx\t%.3fx\t%.3fx\t%.3fx\t\n", r.Run, r.Reference, r.Tokens, r.MFU, r.PeakAlloc,
			float64(r.RunSpeed.PeakUsedBytes)/float64(r.RefSpeed.PeakUsedBytes))
	}
	return tw.Flush()
}

// untimed is the number of first steps both sides leave out of the speed
// (examples/gpt's untimedSteps, torch_gpt.py's UNTIMED_STEPS).
const untimed = 3
