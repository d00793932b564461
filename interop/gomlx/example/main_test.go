package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/distopt/distopt/collective/rendezvous"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/interop/gomlx/internal/ranks"
	"github.com/distopt/distopt/interop/gomlx/internal/toy"
)

// TestGRPCRanks runs what each process of `distopt run -n 2 -- example`
// runs (grpcRank: the rendezvous store, a gRPC communicator, the
// configurations compared through the store), with both ranks in this
// process. Rank 0 must print what the in-process run prints, to the
// digit, and a held-out loss within 2% of GoMLX's Adam.
func TestGRPCRanks(t *testing.T) {
	const d = 2
	o := options{steps: 40, batch: 16, lr: 3e-3, eps: 1e-7, recipe: fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}, task: toy.NewData(toy.Small, 11)}
	var want, got bytes.Buffer
	o.report = &want
	if err := inProcess(d, o); err != nil {
		t.Fatal(err)
	}
	stores := ranks.Stores(t, d)
	ranks.Run(t, d, func(ctx context.Context, r int) error {
		store, err := stores(ctx, r)
		if err != nil {
			return err
		}
		ro := o
		ro.report = io.Discard
		if r == 0 {
			ro.report = &got
		}
		return errors.Join(grpcRank(ctx, store, ro), store.Close())
	})
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Errorf("over gRPC rank 0 printed\n%s\nin-process\n%s", &got, &want)
	}
	m := regexp.MustCompile(`held-out loss after 40 steps: distopt ([0-9.]+)\s+GoMLX Adam ([0-9.]+)`).FindSubmatch(got.Bytes())
	if m == nil {
		t.Fatalf("no held-out loss in:\n%s", &got)
	}
	h, _ := strconv.ParseFloat(string(m[1]), 64)
	adam, _ := strconv.ParseFloat(string(m[2]), 64)
	t.Logf("2 ranks over gRPC: held-out loss %.5f, GoMLX Adam %.5f", h, adam)
	if h > 1.02*adam || h < 0.98*adam {
		t.Errorf("held-out loss %.5f is not within 2%% of GoMLX Adam's %.5f", h, adam)
	}
}

// TestUnderLauncher builds the example and distopt's launcher, runs two
// ranks as processes over gRPC, and checks that rank 0 reports a held-out
// loss within 2% of GoMLX's Adam.
func TestUnderLauncher(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two binaries and starts processes")
	}
	dir := t.TempDir()
	// The launcher is built in the core module (its own go.sum), the
	// example in this one.
	for _, b := range []*exec.Cmd{
		exec.Command("go", "build", "-o", dir, "."),
		exec.Command("go", "build", "-o", dir, "./cmd/distopt"),
	} {
		if b.Args[len(b.Args)-1] != "." {
			b.Dir = filepath.Join("..", "..", "..")
		}
		if out, err := b.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(lis.Addr().(*net.TCPAddr).Port)
	lis.Close()
	run := exec.Command(filepath.Join(dir, "distopt"), "run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", port,
		"--", filepath.Join(dir, "example"), "-steps", "60")
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("distopt run: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`\[rank 0\] held-out loss after 60 steps: distopt ([0-9.]+)\s+GoMLX Adam ([0-9.]+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no held-out loss from rank 0 in:\n%s", out)
	}
	got, _ := strconv.ParseFloat(string(m[1]), 64)
	want, _ := strconv.ParseFloat(string(m[2]), 64)
	t.Logf("2 processes over gRPC: held-out loss %.5f, GoMLX Adam %.5f", got, want)
	if got > 1.02*want || got < 0.98*want {
		t.Errorf("held-out loss %.5f is not within 2%% of GoMLX Adam's %.5f\n%s", got, want, out)
	}
}

// TestGRPCRanksDisagree starts two gRPC ranks with different -steps: both
// must fail at once with rendezvous.ErrDisagree, not wait in a collective.
func TestGRPCRanksDisagree(t *testing.T) {
	o := options{steps: 3, batch: 16, lr: 3e-3, eps: 1e-7, recipe: fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}, task: toy.NewData(toy.Small, 11), report: io.Discard}
	errs := make([]error, 2)
	stores := ranks.Stores(t, 2)
	ranks.Run(t, 2, func(ctx context.Context, r int) error {
		store, err := stores(ctx, r)
		if err != nil {
			return err
		}
		ro := o
		ro.steps += r
		errs[r] = grpcRank(ctx, store, ro)
		return store.Close()
	})
	for r, err := range errs {
		if !errors.Is(err, rendezvous.ErrDisagree) {
			t.Errorf("rank %d: %v, want rendezvous.ErrDisagree", r, err)
		}
	}
	t.Log(errs[0])
}
