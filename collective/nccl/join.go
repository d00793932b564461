package nccl

import (
	"context"
	"errors"
	"fmt"

	"github.com/distopt/distopt/collective/rendezvous"
	"github.com/distopt/distopt/cuda"
)

// Join sets up this process's rank of a job started by the distopt launcher
// or torchrun: it reads the rank, the world size, LOCAL_RANK and the
// master's address from the environment (rendezvous.FromEnv), opens GPU
// LOCAL_RANK, connects to the store (rank 0 serves it) and creates the
// communicator with cfg (whose Store and Device must be nil). Close then
// also closes the store and the device. Errors: those of rendezvous.FromEnv
// and rendezvous.Connect, of cuda.Open (cuda.ErrNoDriver, cuda.ErrNoDevice
// on a host without the GPU) and of New.
func Join(ctx context.Context, cfg Config) (*Comm, error) {
	if cfg.Store != nil || cfg.Device != nil {
		panic("collective/nccl: Join opens the store and the device itself")
	}
	rc, err := rendezvous.FromEnv()
	if err != nil {
		return nil, err
	}
	dev, err := cuda.Open(rc.LocalRank)
	if err != nil {
		return nil, fmt.Errorf("collective/nccl: rank %d: GPU %d (LOCAL_RANK): %w", rc.Rank, rc.LocalRank, err)
	}
	store, err := rendezvous.Connect(ctx, rc)
	if err != nil {
		dev.Close()
		return nil, err
	}
	cfg.Store, cfg.Device = store, dev
	c, err := New(ctx, cfg)
	if err != nil {
		return nil, errors.Join(err, store.Close(), dev.Close())
	}
	c.release = func() error { return errors.Join(store.Close(), dev.Close()) }
	return c, nil
}
