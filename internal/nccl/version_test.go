package nccl

import "testing"

func TestVersionFromCode(t *testing.T) {
	tests := []struct {
		code int
		want Version
	}{
		{2408, Version{2, 4, 8}},
		{2804, Version{2, 8, 4}},
		{20906, Version{2, 9, 6}},
		{21800, Version{2, 18, 0}},
		{21805, Version{2, 18, 5}},
		{22803, Version{2, 28, 3}},
		{30001, Version{3, 0, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.want.String(), func(t *testing.T) {
			if got := VersionFromCode(tt.code); got != tt.want {
				t.Errorf("VersionFromCode(%d) = %v, want %v", tt.code, got, tt.want)
			}
			if got := tt.want.Code(); got != tt.code {
				t.Errorf("%v.Code() = %d, want %d", tt.want, got, tt.code)
			}
		})
	}
}

// TestVersionRoundTrip sweeps every release number NCCL can encode: the
// two encodings meet at 2.8/2.9 without overlapping.
func TestVersionRoundTrip(t *testing.T) {
	for major := 2; major <= 3; major++ {
		for minor := range 100 {
			for patch := range 100 {
				if major == 2 && minor <= 8 && patch >= 10 {
					continue // the old encoding has one digit of patch
				}
				v := Version{major, minor, patch}
				if got := VersionFromCode(v.Code()); got != v {
					t.Fatalf("VersionFromCode(%d) = %v, want %v", v.Code(), got, v)
				}
			}
		}
	}
}

func TestVersionLess(t *testing.T) {
	order := []Version{{2, 9, 9}, {2, 17, 1}, {2, 18, 0}, {2, 18, 3}, {2, 19, 0}, {2, 28, 3}, {3, 0, 0}}
	for i, v := range order {
		for j, w := range order {
			if got := v.Less(w); got != (i < j) {
				t.Errorf("%v.Less(%v) = %v", v, w, got)
			}
		}
	}
	if MinVersion.Less(Version{2, 18, 0}) || (Version{2, 17, 9}).Less(MinVersion) != true {
		t.Errorf("MinVersion = %v, want 2.18.0", MinVersion)
	}
}
