package ptxgen

import (
	"errors"
	"testing"

	"github.com/distopt/distopt/internal/cuda"
)

func TestVariantFor(t *testing.T) {
	tests := []struct {
		major, minor int
		want         Variant
		err          error
	}{
		{7, 5, 0, ErrUnsupported},
		{8, 0, SM80, nil},
		{8, 9, SM80, nil},
		{9, 0, SM90, nil},
		{10, 0, SM90, nil},
		{12, 0, SM90, nil},
	}
	for _, tt := range tests {
		info := cuda.DeviceInfo{Name: "test", Major: tt.major, Minor: tt.minor}
		got, err := VariantFor(info)
		if got != tt.want || !errors.Is(err, tt.err) {
			t.Errorf("VariantFor(sm_%d%d) = %v, %v; want %v, %v", tt.major, tt.minor, got, err, tt.want, tt.err)
		}
	}
}
