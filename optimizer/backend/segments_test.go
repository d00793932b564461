package backend

import (
	"strings"
	"testing"
)

// TestCheckSegments checks that each kind of broken table is named, and a
// valid one passes.
func TestCheckSegments(t *testing.T) {
	ok := []Segment{
		{Off: 0, Len: 100, Mode: ModeHighPrecision},
		{Off: 128, Len: 300, Mode: ModeBlock},
		{Off: 428, Len: 10, Mode: ModeTensorCurrent, Slot: 0},
		{Off: 440, Len: 60, Mode: ModeTile, Slot: 1, Cols: 7},
	}
	if err := CheckSegments(ok, 500, 128); err != nil {
		t.Fatalf("valid table: %v", err)
	}
	for _, c := range []struct {
		name string
		edit func(s []Segment)
		want string
	}{
		{"empty", func(s []Segment) { s[2].Len = 0 }, "empty"},
		{"overlap", func(s []Segment) { s[2].Off = 427 }, "starts before"},
		{"unsorted", func(s []Segment) { s[0], s[1] = s[1], s[0] }, "starts before"},
		{"past the end", func(s []Segment) { s[3].Len = 61 }, "past the shard"},
		{"mode", func(s []Segment) { s[0].Mode = 0 }, "unknown mode"},
		{"slot", func(s []Segment) { s[2].Slot = -1 }, "no slot"},
		{"block alignment", func(s []Segment) { s[1].Off, s[1].Len = 129, 299 }, "multiple of the block"},
		{"tile", func(s []Segment) { s[3].Cols = 0 }, "tile placement"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := append([]Segment(nil), ok...)
			c.edit(s)
			if err := CheckSegments(s, 500, 128); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("CheckSegments: %v, want an error saying %q", err, c.want)
			}
		})
	}
}
