// Package ranks runs the ranks of a job as goroutines of one test: over
// gRPC, connected as the processes of `distopt run` connect (a rendezvous
// store, then a gRPC communicator), or in-process.
package ranks

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/grpccomm"
	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/collective/rendezvous"
	"github.com/distopt/distopt/optimizer"
)

// Timeout bounds a run. It only turns a hang into a failure: it is far
// above the time of any run, even on a loaded machine.
const Timeout = 5 * time.Minute

// Run calls fn for ranks 0 to d-1, each in a goroutine, under one context
// that the first error cancels, so that a failing rank never leaves the
// others waiting in a collective, and fails tb with every rank's error.
func Run(tb testing.TB, d int, fn func(ctx context.Context, r int) error) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	errs := make([]error, d)
	var wg sync.WaitGroup
	for r := range d {
		wg.Go(func() {
			if errs[r] = fn(ctx, r); errs[r] != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		tb.Fatal(err)
	}
}

// Stores serves a rendezvous store on loopback until tb ends, and returns
// the function that connects rank r of d to it.
func Stores(tb testing.TB, d int) func(ctx context.Context, r int) (*rendezvous.Store, error) {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := rendezvous.Serve(lis)
	tb.Cleanup(srv.Close)
	port := lis.Addr().(*net.TCPAddr).Port
	return func(ctx context.Context, r int) (*rendezvous.Store, error) {
		return rendezvous.Dial(ctx, rendezvous.Config{Rank: r, WorldSize: d, LocalRank: r, LocalWorldSize: d,
			MasterAddr: "127.0.0.1", MasterPort: port, RunID: tb.Name()})
	}
}

// Comm is one rank's communicator and, over gRPC, its store.
type Comm struct {
	collective.Communicator
	Store *rendezvous.Store // nil in-process
}

// Agreer returns the store as optimizer.Config.Store takes it (nil
// in-process).
func (c Comm) Agreer() optimizer.Agreer {
	if c.Store == nil {
		return nil
	}
	return c.Store
}

// Close closes the communicator, then the store.
func (c Comm) Close() error {
	if c.Store == nil {
		return nil // the in-process communicators stay usable
	}
	return errors.Join(c.Communicator.Close(), c.Store.Close())
}

// Connect gives rank r its Comm.
type Connect func(ctx context.Context, r int) (Comm, error)

// InProcess connects d ranks through the in-process communicator.
func InProcess(d int) Connect {
	comms := inproc.Communicators(d)
	return func(_ context.Context, r int) (Comm, error) { return Comm{Communicator: comms[r]}, nil }
}

// GRPC connects d ranks over gRPC on loopback: each dials the store of
// Stores and makes its communicator, which listens on a port of its own.
func GRPC(tb testing.TB, d int) Connect {
	tb.Helper()
	stores := Stores(tb, d)
	return func(ctx context.Context, r int) (Comm, error) {
		store, err := stores(ctx, r)
		if err != nil {
			return Comm{}, err
		}
		comm, err := grpccomm.New(ctx, store, grpccomm.Config{})
		if err != nil {
			return Comm{}, errors.Join(err, store.Close())
		}
		return Comm{Communicator: comm, Store: store}, nil
	}
}
