package hier

import (
	"context"
	"errors"

	"github.com/distopt/distopt/collective/grpccomm"
	"github.com/distopt/distopt/collective/rendezvous"
)

// GRPC returns this process's rank of a hierarchical world over gRPC: the
// ranks of store's job in groups of g consecutive ranks (see Layout). The
// group and cross-group communicators are sub-communicators of the job
// (grpccomm.NewSub) named cfg.Name+"/group" and cfg.Name+"/cross"; every
// rank of the job calls GRPC with the same g. Close closes both; the
// caller keeps store open until then.
//
// Errors: ErrConfig when g does not divide the world size, and those of
// grpccomm.NewSub.
func GRPC(ctx context.Context, store *rendezvous.Store, g int, cfg grpccomm.Config) (*Comm, error) {
	group, cross, err := Layout(store.Size(), g, store.Rank())
	if err != nil {
		return nil, err
	}
	name := cfg.Name
	if name == "" {
		name = "default"
	}
	cfg.Name = name + "/group"
	gc, err := grpccomm.NewSub(ctx, store, group, cfg)
	if err != nil {
		return nil, err
	}
	cfg.Name = name + "/cross"
	cc, err := grpccomm.NewSub(ctx, store, cross, cfg)
	if err != nil {
		return nil, errors.Join(err, gc.Close())
	}
	return New(gc, cc)
}
