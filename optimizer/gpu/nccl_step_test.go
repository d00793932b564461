package gpu

import (
	"bytes"
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/nccl"
	"github.com/distopt/distopt/collective/rendezvous"
	"github.com/distopt/distopt/collective/single"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/cuda/cudatest"
	"github.com/distopt/distopt/optimizer"
)

// The NCCL step test re-executes this test binary once per GPU, each
// process being one rank as under the launcher.
const (
	envNCCLRank   = "DISTOPT_TEST_GPU_NCCL_RANK"
	envNCCLConfig = "DISTOPT_TEST_GPU_NCCL_CONFIG"
	envNCCLOut    = "DISTOPT_TEST_GPU_NCCL_OUT"
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

// ncclOutcome is what a rank process reports back.
type ncclOutcome struct {
	Pieces  []optimizer.PieceState
	Tensors map[string]*fp8.Tensor
	Weights map[string][]float32
	Skipped []bool
	Backend string
}

func ncclRankMain() error {
	rc, err := rendezvous.FromEnv()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	be, err := New(rc.LocalRank)
	if err != nil {
		return err
	}
	defer be.Close()
	store, err := rendezvous.Connect(ctx, rc)
	if err != nil {
		return err
	}
	defer store.Close()
	comm, err := nccl.New(ctx, nccl.Config{Store: store, Device: be.Device(), Compute: be.Stream()})
	if err != nil {
		return err
	}
	cfg := stepConfigs()[os.Getenv(envNCCLConfig)]
	params := stepParams()
	o, err := optimizer.New(ctx, comm, be, params, optimizer.FromMap(initValues(params)), cfg)
	if err != nil {
		return err
	}
	out := ncclOutcome{Tensors: map[string]*fp8.Tensor{}, Weights: map[string][]float32{}, Backend: be.Name()}
	for s := range ncclSteps {
		for _, p := range params {
			if err := o.SetGrad(p.Name, rankGrad(p, s, rc.Rank)); err != nil {
				return err
			}
		}
		res, err := o.Step(ctx)
		if err != nil {
			return fmt.Errorf("step %d: %w", s, err)
		}
		out.Skipped = append(out.Skipped, res.Skipped)
	}
	if out.Pieces, err = o.ReadPieces(); err != nil {
		return err
	}
	for _, p := range params {
		if p.HighPrecision {
			out.Weights[p.Name], err = o.Weights(p.Name)
		} else {
			out.Tensors[p.Name], err = o.Tensor(p.Name)
		}
		if err != nil {
			return err
		}
	}
	o.Close()
	// Every rank is done before any closes (a Close aborts the peers).
	if err := collective.Barrier(ctx, comm); err != nil {
		return err
	}
	if err := comm.Close(); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(os.Getenv(envNCCLOut), fmt.Sprintf("rank-%d.gob", rc.Rank)))
	if err != nil {
		return err
	}
	if err := gob.NewEncoder(f).Encode(&out); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func initValues(params []optimizer.Param) map[string][]float32 {
	init := map[string][]float32{}
	r := rand.New(rand.NewPCG(1, 7))
	for _, p := range params {
		v := make([]float32, numel(p.Shape))
		for i := range v {
			v[i] = float32(r.NormFloat64() * 0.05)
		}
		init[p.Name] = v
	}
	return init
}

// meanGrad is the reference average of the two ranks' gradients.
func meanGrad(p optimizer.Param, step int, dt collective.DType) []float32 {
	enc := func(g []float32) []byte {
		if dt == collective.Float32 {
			return collective.ToBytes(g)
		}
		h := make([]uint16, len(g))
		for i, x := range g {
			h[i] = fp8.BF16FromFloat32(x)
		}
		return collective.ToBytes(h)
	}
	srcs := [][]byte{enc(rankGrad(p, step, 0)), enc(rankGrad(p, step, 1))}
	dst := make([]byte, len(srcs[0]))
	collective.Reduce(dst, srcs, dt, collective.Avg)
	if dt == collective.Float32 {
		return collective.FromBytes[float32](dst)
	}
	out := make([]float32, len(g0(dst)))
	for i, h := range g0(dst) {
		out[i] = fp8.Float32FromBF16(h)
	}
	return out
}

func g0(b []byte) []uint16 { return collective.FromBytes[uint16](b) }

// TestNCCLStep runs the optimizer in two processes, one per GPU, with the
// CUDA backend and the NCCL communicator, for every recipe, and compares
// both ranks' masters, moments, FP8 bytes and scales with a single-rank run
// on the CPU backend fed the averaged gradients: they must be bit-identical.
func TestNCCLStep(t *testing.T) {
	count, err := cuda.DeviceCount()
	cudatest.Unavailable(t, err)
	if count < 2 {
		cudatest.Unavailable(t, errors.Join(cuda.ErrNoDevice, fmt.Errorf("the test needs 2 GPUs, found %d", count)))
	}
	for name, cfg := range stepConfigs() {
		t.Run(name, func(t *testing.T) {
			out := t.TempDir()
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			port := l.Addr().(*net.TCPAddr).Port
			l.Close()
			procs := make([]*exec.Cmd, 2)
			for r := range 2 {
				cmd := exec.Command(os.Args[0], "-test.run=^$")
				cmd.Env = append(os.Environ(), envNCCLRank+"=1", envNCCLConfig+"="+name, envNCCLOut+"="+out,
					"RANK="+strconv.Itoa(r), "WORLD_SIZE=2", "LOCAL_RANK="+strconv.Itoa(r), "LOCAL_WORLD_SIZE=2",
					"MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port), "DISTOPT_RUN_ID=nccl-step", "NCCL_NVLS_ENABLE=0")
				cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				procs[r] = cmd
			}
			for r, p := range procs {
				if err := p.Wait(); err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			gt := cfg.GradType
			if gt == 0 {
				gt = collective.BFloat16
			}
			ref := trainWith(t, cfg, func(p optimizer.Param, s int) []float32 { return meanGrad(p, s, gt) })
			full := map[string]optimizer.PieceState{}
			for _, ps := range ref.pieces {
				full[ps.Param] = ps
			}
			for r := range 2 {
				f, err := os.Open(filepath.Join(out, fmt.Sprintf("rank-%d.gob", r)))
				if err != nil {
					t.Fatal(err)
				}
				var got ncclOutcome
				err = gob.NewDecoder(f).Decode(&got)
				f.Close()
				if err != nil {
					t.Fatal(err)
				}
				if r == 0 {
					t.Logf("rank 0 ran on %s", got.Backend)
				}
				if !reflect.DeepEqual(got.Skipped, ref.skipped) {
					t.Errorf("rank %d skipped %v, reference %v", r, got.Skipped, ref.skipped)
				}
				for _, ps := range got.Pieces {
					w := full[ps.Param]
					n := len(ps.Master)
					for _, c := range []struct {
						what      string
						got, want []float32
					}{{"master", ps.Master, w.Master}, {"m", ps.M, w.M}, {"v", ps.V, w.V}} {
						if c.want == nil {
							continue
						}
						if k := firstDiff(c.got, c.want[ps.Offset:ps.Offset+n]); k >= 0 {
							t.Errorf("rank %d %s@%d %s[%d] differs from the CPU reference", r, ps.Param, ps.Offset, c.what, k)
						}
					}
				}
				for n, w := range ref.tensors {
					// Field by field: gob turns an empty shape into nil.
					g := got.Tensors[n]
					if g == nil || !bytes.Equal(g.Data, w.Data) || firstDiff(g.ScaleInv, w.ScaleInv) >= 0 || !bytes.Equal(g.ScaleE8M0, w.ScaleE8M0) ||
						!slices.Equal(g.Shape, w.Shape) || g.Format != w.Format || g.Recipe != w.Recipe {
						t.Errorf("rank %d: FP8 tensor %s differs from the CPU reference", r, n)
					}
				}
				for n, w := range ref.weights {
					if k := firstDiff(got.Weights[n], w); k >= 0 {
						t.Errorf("rank %d: weights %s[%d] differ from the CPU reference", r, n, k)
					}
				}
			}
		})
	}
}

// trainWith is train on one CPU rank with the given gradients.
func trainWith(t *testing.T, cfg optimizer.Config, grad func(p optimizer.Param, step int) []float32) outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	params := stepParams()
	o, err := optimizer.New(ctx, single.New(collective.Host, nil), optimizer.NewCPU(2), params, optimizer.FromMap(initValues(params)), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	var out outcome
	for s := range ncclSteps {
		for _, p := range params {
			if err := o.SetGrad(p.Name, grad(p, s)); err != nil {
				t.Fatal(err)
			}
		}
		res, err := o.Step(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out.skipped = append(out.skipped, res.Skipped)
	}
	if out.pieces, err = o.ReadPieces(); err != nil {
		t.Fatal(err)
	}
	out.tensors, out.weights = map[string]*fp8.Tensor{}, map[string][]float32{}
	for _, p := range params {
		if p.HighPrecision {
			out.weights[p.Name], err = o.Weights(p.Name)
		} else {
			out.tensors[p.Name], err = o.Tensor(p.Name)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}
