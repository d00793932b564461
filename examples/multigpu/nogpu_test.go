package main

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/optimizer/gpu"
)

// TestLaunchedWithoutGPU runs a launched rank with -backend gpu on a host
// without a GPU: it must exit 1 with the "no usable GPU" error, not panic
// while closing the half-built job.
func TestLaunchedWithoutGPU(t *testing.T) {
	if infos, err := cuda.Devices(); err == nil && len(infos) > 0 {
		t.Skipf("this host has %d GPUs", len(infos))
	}
	for k, v := range map[string]string{"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
		"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"} {
		t.Setenv(k, v)
	}
	args := slices.Clone(smallFlags)
	args[slices.Index(args, "cpu")] = "gpu"
	var out, errb bytes.Buffer
	if code := run(args, &out, &errb); code != 1 {
		t.Fatalf("exit %d, want 1\nstderr:\n%s", code, errb.String())
	}
	if want := gpu.ErrUnavailable.Error(); !strings.Contains(errb.String(), want) || !strings.Contains(errb.String(), "-backend cpu") {
		t.Errorf("stderr does not say %q and how to run without a GPU:\n%s", want, errb.String())
	}
	if _, err := launchedJob(t.Context(), "gpu", 1, &out); !errors.Is(err, gpu.ErrUnavailable) {
		t.Errorf("launchedJob: %v, want an error matching gpu.ErrUnavailable", err)
	}
}
