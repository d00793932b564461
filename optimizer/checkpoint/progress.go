package checkpoint

import (
	"os"

	"github.com/distopt/distopt/internal/progress"
)

// Progress receives the progress of Save, Load or ExportHF on the calling
// rank: done of total bytes of that rank's share of the work (the shard
// file it writes, the bytes it reads, the files it exports), from the
// goroutine of the call. A nil Progress receives nothing.
type Progress func(done, total int64)

// report calls p if it is not nil.
func (p Progress) report(done, total int64) {
	if p != nil {
		p(done, total)
	}
}

// TerminalProgress returns a Progress that draws a bar described by desc
// on standard error when standard error is a terminal, and nil (quiet)
// otherwise, so that logs and CI output get no control characters. In a
// job of several ranks give it to one rank (rank 0): every rank reports
// its own bytes.
func TerminalProgress(desc string) Progress {
	f := progress.Terminal(os.Stderr, desc, true)
	if f == nil {
		return nil
	}
	return Progress(f)
}

// meter counts the bytes read by a load, across the shard files a rank
// reads from.
type meter struct {
	p           Progress
	done, total int64
}

// add counts n more bytes. A nil meter counts nothing.
func (m *meter) add(n int64) {
	if m != nil {
		m.done += n
		m.p.report(m.done, m.total)
	}
}
