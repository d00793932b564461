package kernels

import (
	"strings"
	"testing"
)

// TestCompareChunk checks the comparator of the exhaustive test itself: it
// must find every planted difference, in any 64 KiB block, and class them by
// input.
func TestCompareChunk(t *testing.T) {
	const n = 3<<16 + 5
	want := make([]uint8, n)
	for i := range want {
		want[i] = uint8(i * 7)
	}
	got := append([]uint8(nil), want...)
	base := uint32(0x7f800000 - 1<<16) // the chunk runs through +Inf into the NaNs
	plant := []int{0, 1 << 16, 1<<16 + 1, 2<<16 + 3, n - 1}
	for _, i := range plant {
		got[i] ^= 0x80
	}
	var m mismatchLog
	compareChunk(&m, got, want, base)
	if m.total != len(plant) {
		t.Fatalf("found %d mismatches, want %d: %v", m.total, len(plant), &m)
	}
	if m.byClass["+Inf"] != 1 || m.byClass["+NaN"] != 3 || m.byClass["+above-57344"] != 1 {
		t.Errorf("classes %v", m.byClass)
	}
	if s := m.String(); !strings.Contains(s, "in 0x7f800000: gpu 0x80, cpu 0x00") {
		t.Errorf("report lacks the +Inf example:\n%s", s)
	}

	var none mismatchLog
	compareChunk(&none, want, want, 0)
	if none.total != 0 || none.String() != "no mismatch" {
		t.Errorf("equal chunks: %v", &none)
	}
	wide := []uint16{1, 2, 3}
	compareChunk(&m, []uint16{1, 9, 3}, wide, 0)
	if !strings.Contains(m.String(), "gpu 0x0009, cpu 0x0002") {
		t.Errorf("uint16 report:\n%s", m.String())
	}
}
