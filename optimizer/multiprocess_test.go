package optimizer_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/collective/grpccomm"
	"github.com/distopt/distopt/collective/rendezvous"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/optimizertest"
)

// The multi-process test re-executes this test binary once per rank with
// the environment the launcher sets; such a process runs rankMain instead of
// the tests.
const (
	envRankMain = "DISTOPT_TEST_OPTIMIZER_RANK"
	envConfig   = "DISTOPT_TEST_OPTIMIZER_CONFIG"
	envOut      = "DISTOPT_TEST_OPTIMIZER_OUT"
	envSkew     = "DISTOPT_TEST_OPTIMIZER_SKEW"    // this rank gets another shape
	envOverlap  = "DISTOPT_TEST_OPTIMIZER_OVERLAP" // index into overlapVariants
	mpSteps     = 4
)

func TestMain(m *testing.M) {
	if os.Getenv(envRankMain) == "1" {
		if err := rankMain(); err != nil {
			os.WriteFile(filepath.Join(os.Getenv(envOut), "rank-"+os.Getenv("RANK")+".err"), []byte(err.Error()), 0o644)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// rankMain trains one rank over the gRPC backend and writes its result,
// without timings, to the directory in envOut.
func rankMain() error {
	rc, err := rendezvous.FromEnv()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, err := rendezvous.Connect(ctx, rc)
	if err != nil {
		return err
	}
	defer store.Close()
	comm, err := grpccomm.New(ctx, store, grpccomm.Config{})
	if err != nil {
		return err
	}
	defer comm.Close()
	params := optimizertest.AwkwardParams()
	if os.Getenv(envSkew) == strconv.Itoa(rc.Rank) {
		params[3].Shape = []int{8192}
	}
	cfg := optimizertest.Configs()[os.Getenv(envConfig)]
	cfg.Store = store
	var res optimizertest.Result
	if v := os.Getenv(envOverlap); v != "" {
		i, _ := strconv.Atoi(v)
		ov := overlapVariants[i]
		res, err = optimizertest.TrainOverlapped(ctx, comm, cpu.New(1), params, cfg, overlapSteps, nanGrad(max(1, ov.MicroBatches)), ov)
	} else {
		res, err = optimizertest.Train(ctx, comm, cpu.New(1), params, cfg, mpSteps, optimizertest.RankGrad)
	}
	if err != nil {
		return err
	}
	for i := range res.Results {
		res.Results[i].Timings = optimizer.Timings{}
	}
	return optimizertest.WriteResult(os.Getenv(envOut), rc.Rank, res)
}

// startRanks runs world rank processes training with the named
// configuration and returns their exit errors.
func startRanks(t *testing.T, world int, config, out string, env ...string) []error {
	return optimizertest.StartRanks(t, world, append([]string{envRankMain + "=1", envConfig + "=" + config, envOut + "=" + out,
		"DISTOPT_RUN_ID=" + t.Name()}, env...)...)
}

// TestMultiProcessMismatch gives rank 1 of 3 processes another parameter
// shape: every rank refuses to start, and names what differs.
func TestMultiProcessMismatch(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	out := t.TempDir()
	errs := startRanks(t, 3, "E4M3 TensorCurrent(margin=0, pow2=false)", out, envSkew+"=1")
	for r, err := range errs {
		if err == nil {
			t.Fatalf("rank %d started despite the mismatch", r)
		}
		msg, _ := os.ReadFile(filepath.Join(out, fmt.Sprintf("rank-%d.err", r)))
		if !strings.Contains(string(msg), "parameter shapes") || !strings.Contains(string(msg), "rank 1") || !strings.Contains(string(msg), "ranks disagree") {
			t.Fatalf("rank %d: %q, want a mismatch naming rank 1 and the parameter shapes", r, msg)
		}
	}
}

// TestMultiProcess runs the optimizer in 2, 3 and 4 processes joined by the
// gRPC backend over loopback: every rank's state must be bit-identical to a
// single-rank run fed the averaged gradients.
func TestMultiProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	cases := []struct {
		world  int
		config string
	}{
		{2, "E4M3 TensorCurrent(margin=0, pow2=false)"},
		{3, "E4M3 TensorDelayed(margin=0, pow2=false, history=4 max)"},
		{3, "E5M2 MXFP8"},
		{4, "bf16 moments, fp32 grads"},
		{4, "E4M3 Block128x128(margin=0, pow2=false)"},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("d=%d/%s", c.world, c.config), func(t *testing.T) {
			cfg, ok := optimizertest.Configs()[c.config]
			if !ok {
				t.Fatalf("no config %q", c.config)
			}
			out := t.TempDir()
			for r, err := range startRanks(t, c.world, c.config, out) {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			gt := optimizertest.GradType(cfg)
			ref := optimizertest.Run(t, 1, mpSteps, optimizertest.AwkwardParams(), cfg, func(p optimizer.Param, s, _ int) []float32 {
				return optimizertest.MeanGrad(p, s, c.world, gt)
			})[0]
			got := make([]optimizertest.Result, c.world)
			for r := range c.world {
				var err error
				if got[r], err = optimizertest.ReadResult(out, r); err != nil {
					t.Fatal(err)
				}
			}
			compare(t, c.world, ref, got)
		})
	}
}

// TestMultiProcessOverlap runs the overlapped pipeline (GradReady with
// accumulation, StepAsync, WaitParam; a skipped step) in 2, 3 and 4
// processes joined by the gRPC backend, for every configuration of
// optimizertest.Configs (each with one world size and one way of driving
// the pipeline, in rotation): every rank must hold the state of the same
// rank trained in-process by the synchronous Step on the accumulated
// gradients, bit for bit.
func TestMultiProcessOverlap(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	type overlapCase struct {
		world, variant int
		config         string
	}
	var cases []overlapCase
	for i, name := range slices.Sorted(maps.Keys(optimizertest.Configs())) {
		cases = append(cases, overlapCase{world: 2 + i%3, variant: i % len(overlapVariants), config: name})
	}
	for _, c := range cases {
		ov := overlapVariants[c.variant]
		t.Run(fmt.Sprintf("d=%d/%+v/%s", c.world, ov, c.config), func(t *testing.T) {
			cfg := optimizertest.Configs()[c.config]
			out := t.TempDir()
			for r, err := range startRanks(t, c.world, c.config, out, envOverlap+"="+strconv.Itoa(c.variant)) {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			micro := max(1, ov.MicroBatches)
			want := optimizertest.Run(t, c.world, overlapSteps, optimizertest.AwkwardParams(), cfg, optimizertest.Accumulated(nanGrad(micro), micro))
			for r := range c.world {
				got, err := optimizertest.ReadResult(out, r)
				if err != nil {
					t.Fatal(err)
				}
				for i := range want[r].Results {
					want[r].Results[i].Timings = optimizer.Timings{}
				}
				sameRun(t, fmt.Sprintf("rank %d", r), want[r], got)
			}
		})
	}
}
