package cudatest

import (
	"errors"
	"testing"

	"github.com/distopt/distopt/internal/cuda"
)

// fakeTB records what Unavailable asks of a test. Skipf and Fatalf stop the
// calling goroutine in a real test; here they panic so that the code after
// them does not run.
type fakeTB struct {
	testing.TB
	skipped, failed bool
}

type stop struct{}

func (f *fakeTB) Helper()               {}
func (f *fakeTB) Skipf(string, ...any)  { f.skipped = true; panic(stop{}) }
func (f *fakeTB) Fatalf(string, ...any) { f.failed = true; panic(stop{}) }

func run(err error, extra ...error) (f *fakeTB) {
	f = &fakeTB{}
	defer func() {
		if p := recover(); p != nil && p != (stop{}) {
			panic(p)
		}
	}()
	Unavailable(f, err, extra...)
	return f
}

func TestUnavailable(t *testing.T) {
	errLib := errors.New("nccl: no library")
	tests := []struct {
		name    string
		require string
		err     error
		extra   []error
		skip    bool
		fail    bool
	}{
		{"nil error", "", nil, nil, false, false},
		{"no driver skips", "", cuda.ErrNoDriver, nil, true, false},
		{"no device skips", "0", cuda.ErrNoDevice, nil, true, false},
		{"no driver fails when required", "1", cuda.ErrNoDriver, nil, false, true},
		{"no device fails when required", "1", &cuda.Error{Op: "cuInit", Code: cuda.ErrorNoDevice}, nil, false, true},
		{"other error fails", "", errors.New("boom"), nil, false, true},
		{"extra kind skips", "", errLib, []error{errLib}, true, false},
		{"extra kind fails when required", "1", errLib, []error{errLib}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(EnvRequire, tt.require)
			f := run(tt.err, tt.extra...)
			if f.skipped != tt.skip || f.failed != tt.fail {
				t.Errorf("skipped=%v failed=%v, want %v %v", f.skipped, f.failed, tt.skip, tt.fail)
			}
		})
	}
}
