package gpu

import (
	"context"
	"errors"
	"testing"

	"github.com/distopt/distopt/collective/nccl"
	"github.com/distopt/distopt/collective/rendezvous"
)

// TestLocalRank checks that Choose opens the GPU of LOCAL_RANK: an ordinal
// no machine has gives ErrUnavailable, a malformed one ErrBackend.
func TestLocalRank(t *testing.T) {
	t.Setenv(rendezvous.EnvLocalRank, "999")
	if n, err := LocalRank(); n != 999 || err != nil {
		t.Fatalf("LocalRank() = %d, %v with LOCAL_RANK=999", n, err)
	}
	if _, err := Choose("gpu"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Choose(gpu) with LOCAL_RANK=999: %v, want ErrUnavailable", err)
	}
	for _, v := range []string{"-1", "one", ""} {
		t.Setenv(rendezvous.EnvLocalRank, v)
		if _, err := Choose("gpu"); !errors.Is(err, ErrBackend) {
			t.Errorf("Choose(gpu) with LOCAL_RANK=%q: %v, want ErrBackend", v, err)
		}
	}
}

// TestSetupErrors checks Setup's refusals, which come before any
// connection: a configuration of the NCCL communicator that sets what
// Setup sets, a bad job placement, and a GPU that does not exist.
func TestSetupErrors(t *testing.T) {
	rc := rendezvous.Config{Rank: 0, WorldSize: 1000, LocalRank: 999, LocalWorldSize: 1000, MasterAddr: "127.0.0.1", MasterPort: 1}
	ctx := context.Background()
	if _, err := Setup(ctx, rc, nccl.Config{Store: &rendezvous.Store{}}); !errors.Is(err, ErrBackend) {
		t.Errorf("Setup with a store set: %v, want ErrBackend", err)
	}
	bad := rc
	bad.WorldSize = 0
	if _, err := Setup(ctx, bad, nccl.Config{}); !errors.Is(err, rendezvous.ErrConfig) {
		t.Errorf("Setup with world size 0: %v, want rendezvous.ErrConfig", err)
	}
	if _, err := Setup(ctx, rc, nccl.Config{}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Setup on GPU 999: %v, want ErrUnavailable", err)
	}
}
