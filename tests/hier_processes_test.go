package tests

// Hierarchical sharding with one process per rank: `distopt run
// --nproc-per-node 6 [--group-size G]` starts this test binary six times
// (TestHierRankWorker plays one rank: the group size comes from the
// environment the launcher sets, the communicators from the job's store:
// hier.GRPC, or grpccomm.New when flat); each rank writes what it holds of
// the optimizer state to a file, and the test assembles and compares them
// with the in-process runs of hier_test.go.

import (
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/grpccomm"
	"github.com/distopt/distopt/collective/hier"
	"github.com/distopt/distopt/collective/rendezvous"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/checkpoint"
)

// The environment of a worker: the folder its state goes to (set only for
// workers), the number of steps, and a checkpoint to load first or a
// folder to save into at the end (either may be empty).
const (
	envHierOut   = "DISTOPT_HIER_OUT"
	envHierSteps = "DISTOPT_HIER_STEPS"
	envHierLoad  = "DISTOPT_HIER_LOAD"
	envHierSave  = "DISTOPT_HIER_SAVE"
)

// hierProcCfg is the configuration of every run of this file: 1x128 block
// scaling, whose block amaxes and shard alignment differ with the number
// of ranks that share the state.
var hierProcCfg = optimizer.Config{LR: optimizer.Constant(1e-2), WeightDecay: 0.1, MaxGradNorm: 0.5,
	Recipe: fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.Block1x128}}

// buildLauncher builds cmd/distopt into a temporary folder. It skips under
// -short.
func buildLauncher(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the launcher and starts processes")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build the launcher")
	}
	bin := t.TempDir()
	if out, err := exec.Command(goTool, "build", "-o", bin+string(filepath.Separator), "../cmd/distopt").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return filepath.Join(bin, "distopt")
}

// launchHier runs the six ranks under the launcher (group size g, 0: no
// --group-size), stepping to steps, after loading load and before saving
// into save (either may be empty), and returns the assembled state.
func launchHier(t *testing.T, distopt string, g, steps int, load, save string) fullState {
	t.Helper()
	out := t.TempDir()
	args := []string{"run", "--nproc-per-node", strconv.Itoa(hierWorld)}
	if g > 0 {
		args = append(args, "--group-size", strconv.Itoa(g))
	}
	args = append(args, "--", os.Args[0], "-test.run=^TestHierRankWorker$", "-test.v", "-test.timeout=10m")
	cmd := exec.Command(distopt, args...)
	cmd.Env = append(os.Environ(), envHierOut+"="+out, envHierSteps+"="+strconv.Itoa(steps),
		envHierLoad+"="+load, envHierSave+"="+save, hier.EnvGroupSize+"=")
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("distopt run (group size %d): %v\n%s", g, err, b)
	}
	// The group size reached the ranks through the launcher.
	r := hierWorld - 1
	where := fmt.Sprintf("hier worker: global rank %d: flat, rank %d of %d", r, r, hierWorld)
	if g > 0 {
		where = fmt.Sprintf("hier worker: global rank %d: rank %d of %d in group %d of %d", r, r%g, g, r/g, hierWorld/g)
	}
	if !strings.Contains(string(b), where) {
		t.Fatalf("no line %q in the output:\n%s", where, b)
	}
	st, mu := fullState{}, &sync.Mutex{}
	for r := range hierWorld {
		f, err := os.Open(filepath.Join(out, fmt.Sprintf("rank-%d.gob", r)))
		if err != nil {
			t.Fatal(err)
		}
		var d rankDump
		err = gob.NewDecoder(f).Decode(&d)
		f.Close()
		if err == nil {
			err = merge(d, st, mu)
		}
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return st
}

// TestHierarchicalProcesses: six processes under `distopt run`, flat and
// in 2 groups x 3 and 3 groups x 2 (gRPC sub-communicators made from the
// job's store), leave every master, moment and gathered weight
// bit-identical to the in-process flat run and to the in-process
// hierarchical run of the same group size; a checkpoint saved by the
// processes of 3 x 2 loads into in-process flat sharding, and one saved
// flat loads into the processes of 2 x 3, both continuing to the bits of
// an uninterrupted flat run.
func TestHierarchicalProcesses(t *testing.T) {
	distopt := buildLauncher(t)
	const steps, more = 3, 5
	want := trainHier(t, 0, hierProcCfg, steps, "", "")
	for _, g := range []int{0, 3, 2} {
		name := "flat"
		if g > 0 {
			name = fmt.Sprintf("%dx%d", hierWorld/g, g)
		}
		t.Run(name, func(t *testing.T) {
			got := launchHier(t, distopt, g, steps, "", "")
			if err := sameState(want, got); err != nil {
				t.Errorf("processes vs in-process flat: %v", err)
			}
			if g > 0 {
				if err := sameState(trainHier(t, g, hierProcCfg, steps, "", ""), got); err != nil {
					t.Errorf("processes vs in-process %s: %v", name, err)
				}
			}
		})
	}
	wantMore := trainHier(t, 0, hierProcCfg, more, "", "")
	t.Run("checkpoint 3x2 processes to flat", func(t *testing.T) {
		dir := t.TempDir()
		launchHier(t, distopt, 2, steps, "", dir)
		path, err := checkpoint.Latest(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := sameState(wantMore, trainHier(t, 0, hierProcCfg, more, "", path)); err != nil {
			t.Error(err)
		}
	})
	t.Run("checkpoint flat to 2x3 processes", func(t *testing.T) {
		dir := t.TempDir()
		trainHier(t, 0, hierProcCfg, steps, dir, "")
		path, err := checkpoint.Latest(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := sameState(wantMore, launchHier(t, distopt, 3, more, path, "")); err != nil {
			t.Error(err)
		}
	})
}

// TestHierRankWorker is one rank of TestHierarchicalProcesses; it skips
// unless started by it.
func TestHierRankWorker(t *testing.T) {
	out := os.Getenv(envHierOut)
	if out == "" {
		t.Skip("one rank of TestHierarchicalProcesses, started by it")
	}
	steps, err := strconv.Atoi(os.Getenv(envHierSteps))
	if err != nil {
		t.Fatal(err)
	}
	if err := hierRank(out, steps, os.Getenv(envHierLoad), os.Getenv(envHierSave)); err != nil {
		t.Fatal(err)
	}
}

// hierRank trains this process's rank and writes its state to
// out/rank-R.gob.
func hierRank(out string, steps int, load, save string) error {
	rc, err := rendezvous.FromEnv()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	store, err := rendezvous.Connect(ctx, rc)
	if err != nil {
		return err
	}
	defer store.Close()
	g, err := hier.GroupSizeFromEnv(rc.WorldSize)
	if err != nil {
		return err
	}
	var comm collective.Communicator
	if g == 0 {
		comm, err = grpccomm.New(ctx, store, grpccomm.Config{})
	} else {
		comm, err = hier.GRPC(ctx, store, g, grpccomm.Config{})
	}
	if err != nil {
		return err
	}
	defer comm.Close()
	fmt.Println(describeRank(rc.Rank, comm))
	d, err := hierSteps(ctx, comm, rc.Rank, steps, load, save)
	if err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(out, fmt.Sprintf("rank-%d.gob", rc.Rank)))
	if err != nil {
		return err
	}
	if err := errors.Join(gob.NewEncoder(f).Encode(d), f.Close()); err != nil {
		return err
	}
	// Every rank is done before any closes: no rank sees its peers leave
	// while it still steps.
	return store.Barrier(ctx, "hier-worker-done")
}

// describeRank says where global rank r sits, as the test expects it.
func describeRank(r int, comm collective.Communicator) string {
	if h, ok := comm.(*hier.Comm); ok {
		return fmt.Sprintf("hier worker: global rank %d: rank %d of %d in group %d of %d", r, h.Rank(), h.Size(), h.Cross().Rank(), h.Cross().Size())
	}
	return fmt.Sprintf("hier worker: global rank %d: flat, rank %d of %d", r, comm.Rank(), comm.Size())
}

// hierSteps makes the optimizer on comm (global rank r), loads load if
// set, steps to steps, saves into save if set (only the leaders of a
// hierarchical world), and returns the rank's state.
func hierSteps(ctx context.Context, comm collective.Communicator, r, steps int, load, save string) (rankDump, error) {
	o, err := optimizer.New(ctx, comm, cpu.New(1), hierParams, hierInit, hierProcCfg)
	if err != nil {
		return rankDump{}, err
	}
	defer o.Close()
	from := 0
	if load != "" {
		info, err := checkpoint.Load(ctx, o, comm, load, checkpoint.LoadOptions{})
		if err != nil {
			return rankDump{}, err
		}
		from = info.Step
	}
	if err := stepAll(ctx, o, r, from, steps); err != nil {
		return rankDump{}, err
	}
	if h, ok := comm.(*hier.Comm); save != "" && (!ok || h.Leader()) {
		if _, err := checkpoint.Save(ctx, o, comm, save, checkpoint.SaveOptions{}); err != nil {
			return rankDump{}, err
		}
	}
	return dumpRank(o)
}
