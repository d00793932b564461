// Package progress draws the progress of long work (checkpoint save, load
// and export, plan sweeps) as a bar on a terminal, through
// github.com/schollz/progressbar/v3, and nothing where the output is not a
// terminal (a log file, a pipe, CI), so that logs stay free of control
// characters.
package progress

import (
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
)

// Func receives the progress of one piece of work: done of total units,
// done growing to total. A nil Func reports nothing.
type Func func(done, total int64)

// Report calls f if it is not nil.
func (f Func) Report(done, total int64) {
	if f != nil {
		f(done, total)
	}
}

// Terminal returns a Func that draws a bar described by desc on f when f
// is a terminal, and nil (no reports) otherwise. With bytes the units are
// shown as bytes (KiB, MiB, ...), else as a count.
func Terminal(f *os.File, desc string, bytes bool) Func {
	if !IsTerminal(f) {
		return nil
	}
	return Bar(f, desc, bytes)
}

// IsTerminal reports whether f is a terminal (a character device).
func IsTerminal(f *os.File) bool {
	if f == nil {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// Bar returns a Func that always draws on w, terminal or not (Terminal
// decides whether to draw). The bar is made on the first report, with
// that report's total; the report where done reaches total finishes it
// with a newline. Reports of a total below 1 draw nothing. It is safe for
// concurrent use.
func Bar(w io.Writer, desc string, bytes bool) Func {
	var (
		mu  sync.Mutex
		bar *progressbar.ProgressBar
	)
	return func(done, total int64) {
		if total < 1 {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if bar == nil {
			bar = progressbar.NewOptions64(total,
				progressbar.OptionSetWriter(w),
				progressbar.OptionSetDescription(desc),
				progressbar.OptionShowBytes(bytes),
				progressbar.OptionShowCount(),
				progressbar.OptionSetWidth(30),
				progressbar.OptionThrottle(100*time.Millisecond),
				progressbar.OptionOnCompletion(func() { io.WriteString(w, "\n") }),
				progressbar.OptionUseIECUnits(true),
			)
		}
		if bar.GetMax64() != total {
			bar.ChangeMax64(total)
		}
		// Reaching total finishes the bar. A failed write to the
		// terminal is not the work's failure: it is ignored.
		_ = bar.Set64(min(done, total))
	}
}
