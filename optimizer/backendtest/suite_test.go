package backendtest

import (
	"testing"

	"github.com/distopt/distopt/optimizer/cpu"
)

// TestCPU runs the suite against a CPU backend with another number of
// goroutines than the reference: trivially equal, it exercises the suite.
func TestCPU(t *testing.T) {
	Run(t, cpu.New(1))
}
