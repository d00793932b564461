package optimizer

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/optimizer/backend"
)

// gpuComm and gpuBackend stand for a communicator and a backend bound to a
// GPU: device memory, an ordinal.
type gpuComm struct {
	collective.Communicator
	ordinal int
}

func (c gpuComm) Memory() buffer.MemoryKind { return buffer.Device }
func (c gpuComm) Ordinal() int              { return c.ordinal }

type gpuBackend struct {
	*cpu.Backend
	ordinal int
}

func (b gpuBackend) Memory() buffer.MemoryKind { return buffer.Device }
func (b gpuBackend) Ordinal() int              { return b.ordinal }

// TestPlacement checks that New refuses a communicator and a backend on
// different GPUs, or of different memory kinds, naming both, and that a
// pair on one GPU passes the check.
func TestPlacement(t *testing.T) {
	comm := inproc.Communicators(1)[0]
	params := []Param{{Name: "w", Shape: []int{4}}}
	init := FromMap(map[string][]float32{"w": {1, 2, 3, 4}})
	for _, c := range []struct {
		name string
		comm collective.Communicator
		be   backend.Backend
		want string // in the error; "" for none
	}{
		{"GPUs 0 and 1", gpuComm{comm, 0}, gpuBackend{cpu.New(1), 1}, "communicator on GPU 0 but backend"},
		{"host and device", comm, gpuBackend{cpu.New(1), 0}, "takes host memory"},
		{"one GPU", gpuComm{comm, 3}, gpuBackend{cpu.New(1), 3}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := checkPlacement(c.comm, c.be)
			if c.want == "" {
				if err != nil {
					t.Fatalf("checkPlacement: %v", err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("checkPlacement: %v, want ErrConfig saying %q", err, c.want)
			}
			if _, err := New(context.Background(), c.comm, c.be, params, init, Config{}); !errors.Is(err, ErrConfig) {
				t.Fatalf("New: %v, want ErrConfig", err)
			}
		})
	}
}
