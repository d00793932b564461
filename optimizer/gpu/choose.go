package gpu

import (
	"errors"
	"fmt"

	"github.com/distopt/distopt/optimizer"
)

// Choose returns the backend req names:
//
//   - "cpu": optimizer.NewCPU(0);
//   - "gpu": New(0), or its error (matching ErrUnavailable when there is no
//     driver or GPU): never the CPU backend;
//   - "auto": New(0) when a GPU is usable, the CPU backend when there is no
//     driver or GPU, and any other GPU error as an error.
//
// The returned backend's Name says which was picked. Any other req gives
// ErrBackend.
func Choose(req string) (optimizer.Backend, error) {
	switch req {
	case "cpu":
		return optimizer.NewCPU(0), nil
	case "gpu":
		b, err := New(0)
		if err != nil {
			return nil, err
		}
		return b, nil
	case "auto":
		b, err := New(0)
		if errors.Is(err, ErrUnavailable) {
			return optimizer.NewCPU(0), nil
		}
		if err != nil {
			return nil, err
		}
		return b, nil
	}
	return nil, fmt.Errorf("%w: %q (want cpu, gpu or auto)", ErrBackend, req)
}
