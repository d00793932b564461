package gpu

import (
	"errors"
	"strings"
	"testing"

	"github.com/distopt/distopt/internal/cuda/cudatest"
	"github.com/distopt/distopt/optimizer/backendtest"
)

// open opens the backend on GPU 0, or skips (fails with
// DISTOPT_REQUIRE_GPU=1) without one.
func open(t *testing.T) *Backend {
	t.Helper()
	b, err := New(0)
	cudatest.Unavailable(t, err)
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	t.Logf("backend: %s", b.Name())
	return b
}

// TestConformance runs the backend conformance suite: every output byte of
// GradStats, Update and Cast equals the CPU backend's.
func TestConformance(t *testing.T) {
	backendtest.Run(t, open(t))
}

func TestChoose(t *testing.T) {
	cpu, err := Choose("cpu")
	if err != nil || !strings.HasPrefix(cpu.Name(), "cpu") {
		t.Fatalf("Choose(cpu) = %v, %v", cpu, err)
	}
	if _, err := Choose("tpu"); !errors.Is(err, ErrBackend) {
		t.Errorf("Choose(tpu) error %v, want ErrBackend", err)
	}
	g, gerr := Choose("gpu")
	auto, aerr := Choose("auto")
	if aerr != nil {
		t.Fatalf("Choose(auto): %v", aerr)
	}
	defer auto.Close()
	switch {
	case gerr == nil:
		defer g.Close()
		if !strings.HasPrefix(g.Name(), "cuda:0 ") || !strings.HasPrefix(auto.Name(), "cuda:0 ") {
			t.Errorf("with a GPU: Choose(gpu) is %q, Choose(auto) is %q", g.Name(), auto.Name())
		}
	case errors.Is(gerr, ErrUnavailable):
		if !errors.Is(gerr, ErrNoDriver) && !errors.Is(gerr, ErrNoDevice) {
			t.Errorf("Choose(gpu) error %v matches neither ErrNoDriver nor ErrNoDevice", gerr)
		}
		if !strings.HasPrefix(auto.Name(), "cpu") {
			t.Errorf("without a GPU Choose(auto) is %q", auto.Name())
		}
		cudatest.Unavailable(t, gerr)
	default:
		t.Fatalf("Choose(gpu): %v", gerr)
	}
}
