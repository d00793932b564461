package gpumodel

import (
	"fmt"

	"github.com/distopt/distopt/internal/cuda"
)

// Logits downloads the logits of the last Forward, rows x vocabulary
// float32 values row-major (row b*seq + t: sequence b, position t), into
// dst. They are the logits only after a Forward with dloss 0; a Forward
// with dloss != 0 leaves their gradient in their place.
func (m *Model) Logits(dst []float32) error {
	if want := m.rows * m.cfg.Vocab; len(dst) != want {
		return fmt.Errorf("gpumodel: Logits into %d values, want %d (%d rows x vocabulary %d)", len(dst), want, m.rows, m.cfg.Vocab)
	}
	return m.s.Download(cuda.Bytes(dst), m.logits)
}
