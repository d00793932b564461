package optimizer

import (
	"context"
	"encoding/gob"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/grpccomm"
	"github.com/distopt/distopt/collective/rendezvous"
	"github.com/distopt/distopt/fp8"
)

// The multi-process test re-executes this test binary once per rank with
// the environment the launcher sets; such a process runs rankMain instead of
// the tests.
const (
	envRankMain = "DISTOPT_TEST_OPTIMIZER_RANK"
	envConfig   = "DISTOPT_TEST_OPTIMIZER_CONFIG"
	envOut      = "DISTOPT_TEST_OPTIMIZER_OUT"
	envSkew     = "DISTOPT_TEST_OPTIMIZER_SKEW" // this rank gets another shape
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

// processResult is what a rank process reports back.
type processResult struct {
	Pieces  []PieceState
	Tensors map[string]*fp8.Tensor
	Weights map[string][]float32
	Results []StepResult
}

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
	params := awkwardParams()
	if os.Getenv(envSkew) == strconv.Itoa(rc.Rank) {
		params[3].Shape = []int{8192}
	}
	cfg := configs()[os.Getenv(envConfig)]
	cfg.Store = store
	o, err := New(ctx, comm, NewCPU(1), params, FromMap(initWeights(params, 1)), cfg)
	if err != nil {
		return err
	}
	defer o.Close()
	res := processResult{Tensors: map[string]*fp8.Tensor{}, Weights: map[string][]float32{}}
	for s := range mpSteps {
		for _, p := range params {
			if err := o.SetGrad(p.Name, rankGrad(p, s, rc.Rank)); err != nil {
				return err
			}
		}
		sr, err := o.Step(ctx)
		if err != nil {
			return err
		}
		sr.Timings = Timings{}
		res.Results = append(res.Results, sr)
	}
	if res.Pieces, err = o.ReadPieces(); err != nil {
		return err
	}
	for _, p := range params {
		if p.HighPrecision {
			res.Weights[p.Name], err = o.Weights(p.Name)
		} else {
			res.Tensors[p.Name], err = o.Tensor(p.Name)
		}
		if err != nil {
			return err
		}
	}
	f, err := os.Create(filepath.Join(os.Getenv(envOut), fmt.Sprintf("rank-%d.gob", rc.Rank)))
	if err != nil {
		return err
	}
	if err := gob.NewEncoder(f).Encode(&res); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startRanks runs world rank processes and returns their exit errors.
func startRanks(t *testing.T, world int, config, out string, env ...string) []error {
	port := freePort(t)
	procs := make([]*exec.Cmd, world)
	for r := range world {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envRankMain+"=1", envConfig+"="+config, envOut+"="+out,
			"RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(world), "LOCAL_RANK="+strconv.Itoa(r),
			"LOCAL_WORLD_SIZE="+strconv.Itoa(world), "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port),
			"DISTOPT_RUN_ID="+t.Name())
		cmd.Env = append(cmd.Env, env...)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs[r] = cmd
	}
	errs := make([]error, world)
	for r, p := range procs {
		errs[r] = p.Wait()
	}
	return errs
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
			cfg, ok := configs()[c.config]
			if !ok {
				t.Fatalf("no config %q", c.config)
			}
			out := t.TempDir()
			for r, err := range startRanks(t, c.world, c.config, out) {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			gt := cfg.GradType
			if gt == 0 {
				gt = collective.BFloat16
			}
			ref := run(t, 1, mpSteps, awkwardParams(), cfg, func(p Param, s, _ int) []float32 { return meanGrad(p, s, c.world, gt) })[0]
			got := make([]rankResult, c.world)
			for r := range c.world {
				f, err := os.Open(filepath.Join(out, fmt.Sprintf("rank-%d.gob", r)))
				if err != nil {
					t.Fatal(err)
				}
				var pr processResult
				err = gob.NewDecoder(f).Decode(&pr)
				f.Close()
				if err != nil {
					t.Fatal(err)
				}
				got[r] = rankResult{pieces: pr.Pieces, tensors: pr.Tensors, weights: pr.Weights, results: pr.Results}
			}
			compare(t, c.world, awkwardParams(), ref, got)
		})
	}
}
