package gpu

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/optimizer/backend"

	"github.com/distopt/distopt/collective/rendezvous"
)

// Choose returns the backend req names:
//
//   - "cpu": cpu.New(0);
//   - "gpu": New(LocalRank()), or its error (matching ErrUnavailable when
//     there is no driver or GPU): never the CPU backend;
//   - "auto": New(LocalRank()) when a GPU is usable, the CPU backend when
//     there is no driver or GPU, and any other GPU error as an error.
//
// The returned backend's Name says which was picked. Any other req gives
// ErrBackend. For a GPU job, Setup also makes the communicator on the same
// device and stream.
func Choose(req string) (backend.Backend, error) {
	if req != "cpu" && req != "gpu" && req != "auto" {
		return nil, fmt.Errorf("%w: %q (want cpu, gpu or auto)", ErrBackend, req)
	}
	if req == "cpu" {
		return cpu.New(0), nil
	}
	ordinal, err := LocalRank()
	if err != nil {
		return nil, err
	}
	switch req {
	case "gpu":
		b, err := New(ordinal)
		if err != nil {
			return nil, err
		}
		return b, nil
	default: // "auto"
		b, err := New(ordinal)
		if errors.Is(err, ErrUnavailable) {
			return cpu.New(0), nil
		}
		if err != nil {
			return nil, err
		}
		return b, nil
	}
}

// LocalRank returns the GPU of this process: LOCAL_RANK as the launcher
// and torchrun set it, or 0 when it is unset. A value that is not a
// non-negative integer is an error wrapping ErrBackend.
func LocalRank() (int, error) {
	v, ok := os.LookupEnv(rendezvous.EnvLocalRank)
	if !ok {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%w: %s=%q is not a GPU ordinal", ErrBackend, rendezvous.EnvLocalRank, v)
	}
	return n, nil
}
