package optimizer_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/collective/inproc"
)

// A wrong or missing initial value of a known parameter is a configuration
// error that names the parameter once; it is not an unknown parameter.
func TestInitialValueErrors(t *testing.T) {
	params := []optimizer.Param{{Name: "w", Shape: []int{4, 8}}, {Name: "b", Shape: []int{8}, HighPrecision: true}}
	for _, tc := range []struct {
		name string
		init map[string][]float32
		want string
	}{
		{"short", map[string][]float32{"w": make([]float32, 30), "b": make([]float32, 8)}, `optimizer: initial value of "w": 30 elements, want 32: invalid configuration`},
		{"long", map[string][]float32{"w": make([]float32, 33), "b": make([]float32, 8)}, `optimizer: initial value of "w": 33 elements, want 32: invalid configuration`},
		{"missing", map[string][]float32{"w": make([]float32, 32)}, `optimizer: initial value of "b": not in the map: invalid configuration`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := optimizer.New(context.Background(), inproc.Communicators(1)[0], cpu.New(1), params, optimizer.FromMap(tc.init), optimizer.Config{})
			if !errors.Is(err, optimizer.ErrConfig) || errors.Is(err, optimizer.ErrUnknownParam) {
				t.Errorf("New: %v; want ErrConfig, not ErrUnknownParam", err)
			}
			if err == nil || err.Error() != tc.want {
				t.Errorf("New: %v\nwant %s", err, tc.want)
			}
			if n := strings.Count(err.Error(), "initial value"); n != 1 {
				t.Errorf("%q says \"initial value\" %d times", err, n)
			}
			if n := strings.Count(err.Error(), "optimizer:"); n != 1 {
				t.Errorf("%q says \"optimizer:\" %d times", err, n)
			}
		})
	}
}
