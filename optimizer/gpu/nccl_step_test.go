package gpu

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/nccl"
	"github.com/distopt/distopt/collective/single"
	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/cuda/cudatest"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/optimizertest"
)

// The NCCL step test re-executes this test binary once per GPU, each
// process being one rank as under the launcher.
const (
	envNCCLRank   = "DISTOPT_TEST_GPU_NCCL_RANK"
	envNCCLConfig = "DISTOPT_TEST_GPU_NCCL_CONFIG"
	envNCCLOut    = "DISTOPT_TEST_GPU_NCCL_OUT"
	envNCCLMicro  = "DISTOPT_TEST_GPU_NCCL_MICRO" // overlapped, with this many micro-batches
	ncclSteps     = 6
)

func TestMain(m *testing.M) {
	if os.Getenv(envNCCLRank) == "1" {
		if err := ncclRankMain(); err != nil {
			fmt.Fprintln(os.Stderr, "rank:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// rankGrad is rank r's gradient: stepGrad perturbed per rank by small
// multiples of powers of two, so that the average over 2 ranks is exact
// whatever order NCCL sums in (and equal to collective.Reduce's).
func rankGrad(p optimizer.Param, step, rank int) []float32 {
	g := stepGrad(p, step)
	r := rand.New(rand.NewPCG(uint64(step*7+rank), 99))
	for i := range g {
		g[i] += float32(r.IntN(9)-4) / 64
	}
	return g
}

func ncclRankMain() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rank, err := SetupFromEnv(ctx, nccl.Config{})
	if err != nil {
		return err
	}
	defer rank.Close()
	be, comm := rank.Backend, rank.Comm
	if be.Ordinal() != rank.Store.Config().LocalRank || comm.Ordinal() != be.Ordinal() {
		return fmt.Errorf("backend on GPU %d, communicator on GPU %d, LOCAL_RANK %d", be.Ordinal(), comm.Ordinal(), rank.Store.Config().LocalRank)
	}
	cfg := stepConfigs()[os.Getenv(envNCCLConfig)]
	var out optimizertest.Result
	if m := os.Getenv(envNCCLMicro); m != "" {
		micro, _ := strconv.Atoi(m)
		ov := optimizertest.Overlap{MicroBatches: micro, Shuffle: micro > 1}
		out, err = optimizertest.TrainOverlapped(ctx, comm, be, optimizertest.AwkwardParams(), cfg, ncclSteps, rankGrad, ov)
	} else {
		out, err = optimizertest.Train(ctx, comm, be, optimizertest.AwkwardParams(), cfg, ncclSteps, rankGrad)
	}
	if err != nil {
		return err
	}
	// Every rank is done before any closes (a Close aborts the peers).
	if err := collective.Barrier(ctx, comm); err != nil {
		return err
	}
	if err := comm.Close(); err != nil {
		return err
	}
	return optimizertest.WriteResult(os.Getenv(envNCCLOut), comm.Rank(), out)
}

// TestNCCLStep runs the optimizer in two processes, one per GPU, with the
// CUDA backend and the NCCL communicator, for every recipe, and compares
// both ranks' masters, moments, FP8 bytes and scales with a single-rank run
// on the CPU backend fed the averaged gradients: they must be bit-identical.
func TestNCCLStep(t *testing.T) {
	testNCCL(t, 0)
}

// TestNCCLOverlap is TestNCCLStep through the overlapped pipeline
// (GradReady in a different order on each rank, StepAsync, WaitParam),
// without and with accumulation over 3 micro-batches: the reference is fed
// the average of the ranks' accumulated gradients.
func TestNCCLOverlap(t *testing.T) {
	for _, micro := range []int{1, 3} {
		t.Run(fmt.Sprintf("micro=%d", micro), func(t *testing.T) { testNCCL(t, micro) })
	}
}

// testNCCL runs TestNCCLStep, through the overlapped pipeline with micro
// micro-batches unless micro is 0.
func testNCCL(t *testing.T, micro int) {
	count, err := cuda.DeviceCount()
	cudatest.Unavailable(t, err)
	if count < 2 {
		cudatest.Unavailable(t, errors.Join(cuda.ErrNoDevice, fmt.Errorf("the test needs 2 GPUs, found %d", count)))
	}
	grad := rankGrad
	env := []string{"DISTOPT_RUN_ID=nccl-step", "NCCL_NVLS_ENABLE=0"}
	if micro > 0 {
		grad = optimizertest.Accumulated(rankGrad, micro)
		env = append(env, envNCCLMicro+"="+strconv.Itoa(micro))
	}
	for name, cfg := range stepConfigs() {
		t.Run(name, func(t *testing.T) {
			out := t.TempDir()
			errs := optimizertest.StartRanks(t, 2, append([]string{envNCCLRank + "=1", envNCCLConfig + "=" + name, envNCCLOut + "=" + out}, env...)...)
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			gt := optimizertest.GradType(cfg)
			ref := train(t, single.New(buffer.Host, nil), cpu.New(2), cfg, ncclSteps, func(p optimizer.Param, s, _ int) []float32 {
				return optimizertest.Mean(gt, grad(p, s, 0), grad(p, s, 1))
			})
			for r := range 2 {
				got, err := optimizertest.ReadResult(out, r)
				if err != nil {
					t.Fatal(err)
				}
				if r == 0 {
					t.Logf("rank 0 ran on %s", got.Backend)
				}
				if !reflect.DeepEqual(got.Skipped(), ref.Skipped()) {
					t.Errorf("rank %d skipped %v, reference %v", r, got.Skipped(), ref.Skipped())
				}
				for _, d := range optimizertest.Diff(ref, got) {
					t.Errorf("rank %d against the CPU reference: %s", r, d)
				}
			}
		})
	}
}
