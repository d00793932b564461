package kernels

import (
	"bytes"
	"testing"
)

// TestStaticPart checks that two tables differing only in their per-step
// factors have the same static part, and tables differing in anything else
// do not.
func TestStaticPart(t *testing.T) {
	base := []Segment{{Off: 0, Len: 5000, Mode: ModeTensorCurrent, Slot: 1, StepSize: 1e-3, Decay: 0.99}, {Off: 5120, Len: 7, Mode: ModeTile, Slot: 4, StepSize: 2e-3, Decay: 1, ParamOffset: 3, Cols: 9}}
	later := []Segment{base[0], base[1]}
	later[0].StepSize, later[1].Decay = 5e-4, 0.5
	other := []Segment{base[0], base[1]}
	other[1].Slot = 5
	a, b, c := PackSegments(base), PackSegments(later), PackSegments(other)
	if bytes.Equal(a.Bytes, b.Bytes) {
		t.Fatal("tables with other factors pack the same")
	}
	if !bytes.Equal(StaticPart(a.Bytes), StaticPart(b.Bytes)) {
		t.Fatal("static parts differ for tables that differ only in factors")
	}
	if bytes.Equal(StaticPart(a.Bytes), StaticPart(c.Bytes)) {
		t.Fatal("static parts agree for tables with different slots")
	}
	if bytes.Equal(StaticPart(a.Bytes), a.Bytes) || len(StaticPart(a.Bytes)) != len(a.Bytes) {
		t.Fatal("StaticPart did not clear the factors")
	}
}
