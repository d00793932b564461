package gpu

import (
	"context"
	"errors"
	"fmt"

	"github.com/distopt/distopt/optimizer/backend"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/fp8grad"
	"github.com/distopt/distopt/collective/nccl"
	"github.com/distopt/distopt/collective/rendezvous"
)

// Rank is one process's rank of a GPU job, wired so that it cannot be got
// wrong: the CUDA backend and the NCCL communicator share the GPU of
// LOCAL_RANK, and the communicator orders every collective after the work
// the backend queued before it (its Compute stream is the backend's
// stream). Pass Backend and Comm to optimizer.New.
type Rank struct {
	Backend *Backend
	Comm    *nccl.Comm
	Store   *rendezvous.Store // the job's rendezvous store (also optimizer.Config.Store)

	grads *fp8grad.Comm // the wrapper of Comm made by FP8Gradients, or nil
}

// Setup opens GPU rc.LocalRank, connects to the job's rendezvous store and
// creates the NCCL communicator on the backend's device and stream, with
// the other settings of cfg (whose Store, Device and Compute must be nil:
// Setup sets them). Every rank calls it at about the same time. Errors:
// rendezvous.ErrConfig for a bad rc, ErrUnavailable without a driver or
// GPU, and those of rendezvous.Connect and nccl.New; on error nothing stays
// open.
func Setup(ctx context.Context, rc rendezvous.Config, cfg nccl.Config) (*Rank, error) {
	if cfg.Store != nil || cfg.Device != nil || cfg.Compute != nil {
		return nil, fmt.Errorf("gpu: Setup sets the store, device and stream of the NCCL configuration itself: %w", ErrBackend)
	}
	if err := rc.Validate(); err != nil {
		return nil, err
	}
	be, err := New(rc.LocalRank)
	if err != nil {
		return nil, fmt.Errorf("gpu: rank %d: GPU %d (LOCAL_RANK): %w", rc.Rank, rc.LocalRank, err)
	}
	store, err := rendezvous.Connect(ctx, rc)
	if err != nil {
		return nil, errors.Join(err, be.Close())
	}
	cfg.Store, cfg.Device, cfg.Compute = store, be.Device(), be.Stream()
	comm, err := nccl.New(ctx, cfg)
	if err != nil {
		return nil, errors.Join(err, store.Close(), be.Close())
	}
	return &Rank{Backend: be, Comm: comm, Store: store}, nil
}

// SetupFromEnv is Setup for a process started by the distopt launcher or
// torchrun: the job's place comes from rendezvous.FromEnv.
func SetupFromEnv(ctx context.Context, cfg nccl.Config) (*Rank, error) {
	rc, err := rendezvous.FromEnv()
	if err != nil {
		return nil, err
	}
	return Setup(ctx, rc, cfg)
}

// Close closes the communicator (the FP8 gradient wrapper of FP8Gradients
// when there is one, which closes Comm), then the backend (and with it the
// device), then the store. Close the optimizer first.
func (r *Rank) Close() error {
	var comm collective.Communicator = r.Comm
	if r.grads != nil {
		comm = r.grads
	}
	return errors.Join(comm.Close(), r.Backend.Close(), r.Store.Close())
}

var (
	_ backend.OnDevice = (*Backend)(nil)
	_ backend.OnDevice = (*nccl.Comm)(nil)
)
