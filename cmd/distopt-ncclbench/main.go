// Command distopt-ncclbench times distopt's NCCL communicator on the
// collectives of a ZeRO-1 step with FP8 parameters: the all-gather of 2^30
// parameters as FP8 bytes and as BF16, and the reduce-scatter of 2^30 BF16
// gradients (sum, NCCL's average, and the exact average), one process per
// GPU.
//
// Usage:
//
//	distopt-ncclbench [-nproc 2] [-elements 1073741824] [-iters 20] [-trials 3] [-json file]
//	distopt-ncclbench -latency [-ops 200] [-nproc 2] [-json file]
//
// Started without RANK in the environment it starts -nproc copies of
// itself as the ranks of a local job (the variables torchrun sets, and
// NCCL_NVLS_ENABLE=0); started by a launcher it is one rank. Rank 0 prints
// one line per measurement and writes them to -json: the median over
// -trials of the time per operation, each trial timing -iters operations
// started back to back after a barrier, the algorithm bandwidth (bytes of
// the larger buffer / time) and the bus bandwidth (algorithm bandwidth ×
// (n-1)/n), in GB/s of 10^9 bytes, as nccl-tests counts them.
// scripts/bench/torch_collectives.py measures PyTorch the same way.
//
// With -latency it measures instead the latency of collectives too small
// to cost transfer time, each waited before the next is started: -ops
// barriers and 4-byte all-reduces through collective/nccl, with the median
// of each phase of a group (nccl.Phases: taken by the issuer, ncclGroupEnd
// returned, launch finished, event recorded, completion seen, Wait
// returned); the same all-reduce through the NCCL binding alone, on a
// non-blocking and on a blocking communicator (synchronized in one hop to
// the device's thread, or its event polled with runtime.Gosched or a 10 µs
// time.Sleep between looks); and, on the host alone, a 10 µs time.Sleep,
// runtime.Gosched and a round trip to the device's thread (cuda.Device.Do).
// Rank 0 prints the median and 90th percentile of each, in µs.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"time"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/nccl"
	"github.com/distopt/distopt/collective/rendezvous"
	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/cudalink"
)

// Result is one measurement, as written to -json.
type Result struct {
	Name      string  `json:"name"`
	Op        string  `json:"op"`
	DType     string  `json:"dtype"`
	Ranks     int     `json:"ranks"`
	Bytes     int64   `json:"bytes"` // the larger buffer of one rank
	TimeMS    float64 `json:"time_ms"`
	AlgBWGBps float64 `json:"algbw_gbps"`
	BusBWGBps float64 `json:"busbw_gbps"`
	Backend   string  `json:"backend"`
}

func main() {
	nproc := flag.Int("nproc", 2, "ranks to start when not started by a launcher")
	elements := flag.Int("elements", 1<<30, "parameters (and gradients) gathered (reduced) by all ranks together")
	iters := flag.Int("iters", 20, "operations per trial")
	warmup := flag.Int("warmup", 5, "operations before the trials")
	trials := flag.Int("trials", 3, "trials per measurement (the median is reported)")
	jsonPath := flag.String("json", "", "file for rank 0's results (JSON lines)")
	lat := flag.Bool("latency", false, "measure the latency of small waited collectives instead")
	ops := flag.Int("ops", 200, "operations per measurement of -latency")
	flag.Parse()
	if os.Getenv(rendezvous.EnvRank) == "" {
		if err := spawn(*nproc); err != nil {
			fmt.Fprintln(os.Stderr, "distopt-ncclbench:", err)
			os.Exit(1)
		}
		return
	}
	latOps := 0
	if *lat {
		latOps = *ops
	}
	if err := run(*elements, *iters, *warmup, *trials, latOps, *jsonPath); err != nil {
		fmt.Fprintln(os.Stderr, "distopt-ncclbench:", err)
		os.Exit(1)
	}
}

// spawn starts n copies of this program as the ranks of a local job and
// waits for them.
func spawn(n int) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmds := make([]*exec.Cmd, n)
	for r := range n {
		cmd := exec.Command(os.Args[0], os.Args[1:]...)
		cmd.Env = append(os.Environ(), "NCCL_NVLS_ENABLE=0",
			"RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(n),
			"LOCAL_RANK="+strconv.Itoa(r), "LOCAL_WORLD_SIZE="+strconv.Itoa(n),
			"MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port))
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Start(); err != nil {
			return err
		}
		cmds[r] = cmd
	}
	var errs []error
	for r, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("rank %d: %w", r, err))
		}
	}
	return errors.Join(errs...)
}

// bench is one rank's state.
type bench struct {
	dev          *cuda.Device
	plain, exact *nccl.Comm
	iters, warm  int
	trials       int
}

// run is one rank: the bandwidth benchmarks, or with latOps > 0 the
// latency ones.
func run(elements, iters, warmup, trials, latOps int, jsonPath string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	rc, err := rendezvous.FromEnv()
	if err != nil {
		return err
	}
	dev, err := cuda.Open(rc.LocalRank)
	if err != nil {
		return err
	}
	defer dev.Close()
	store, err := rendezvous.Connect(ctx, rc)
	if err != nil {
		return err
	}
	defer store.Close()
	b := &bench{dev: dev, iters: iters, warm: warmup, trials: trials}
	if b.plain, err = nccl.New(ctx, nccl.Config{Store: store, Device: cudalink.PublicDevice(dev)}); err != nil {
		return err
	}
	defer b.plain.Close()
	if latOps > 0 {
		return runLatency(ctx, b, store, latOps, jsonPath)
	}
	if b.exact, err = nccl.New(ctx, nccl.Config{Store: store, Device: cudalink.PublicDevice(dev), ExactAvg: true}); err != nil {
		return err
	}
	defer b.exact.Close()
	return runBandwidth(ctx, b, rc, elements, jsonPath)
}

// runBandwidth times every collective of bandwidthSpecs over elements
// parameters; rank 0 prints one row each and writes them to jsonPath.
func runBandwidth(ctx context.Context, b *bench, rc rendezvous.Config, elements int, jsonPath string) error {
	n := rc.WorldSize
	if elements%n != 0 {
		return fmt.Errorf("-elements %d is not a multiple of %d ranks", elements, n)
	}
	if rc.Rank == 0 {
		fmt.Printf("# distopt-ncclbench: %d ranks, %v, GPU %s, %d elements, %d trials x %d ops\n",
			n, b.plain.Library(), b.dev.Info().Name, elements, b.trials, b.iters)
	}
	var results []Result
	for _, s := range b.bandwidthSpecs() {
		r, err := b.measure(ctx, s, elements, n)
		if err != nil {
			return err
		}
		results = append(results, r)
		if rc.Rank == 0 {
			fmt.Printf("%-30s %12d B %9.3f ms  algbw %7.1f GB/s  busbw %7.1f GB/s\n", r.Name, r.Bytes, r.TimeMS, r.AlgBWGBps, r.BusBWGBps)
		}
	}
	if err := collective.Barrier(ctx, b.plain); err != nil {
		return err
	}
	if rc.Rank == 0 && jsonPath != "" {
		return writeResults(jsonPath, results)
	}
	return nil
}

// bandwidthSpec is one collective runBandwidth times.
type bandwidthSpec struct {
	name   string
	comm   *nccl.Comm
	kind   collective.OpKind
	dt     buffer.DType
	red    collective.ReduceOp
	elSize int // bytes per parameter or gradient
}

// bandwidthSpecs are the all-gathers of FP8 and BF16 parameters and the
// reduce-scatters of BF16 and FP32 gradients, in the order of the output.
func (b *bench) bandwidthSpecs() []bandwidthSpec {
	return []bandwidthSpec{
		{"allgather_fp8", b.plain, collective.OpAllGather, buffer.Uint8, 0, 1},
		{"allgather_bf16", b.plain, collective.OpAllGather, buffer.Uint8, 0, 2},
		{"reducescatter_bf16_sum", b.plain, collective.OpReduceScatter, buffer.BFloat16, collective.Sum, 2},
		{"reducescatter_bf16_avg", b.plain, collective.OpReduceScatter, buffer.BFloat16, collective.Avg, 2},
		{"reducescatter_bf16_avg_exact", b.exact, collective.OpReduceScatter, buffer.BFloat16, collective.Avg, 2},
		{"reducescatter_f32_avg_exact", b.exact, collective.OpReduceScatter, buffer.Float32, collective.Avg, 4},
	}
}

// measure times s over elements parameters on n ranks, in buffers of its
// own that it frees.
func (b *bench) measure(ctx context.Context, s bandwidthSpec, elements, n int) (Result, error) {
	full, part := elements*s.elSize, elements/n*s.elSize
	big, err := b.buffer(full)
	if err != nil {
		return Result{}, err
	}
	small, err := b.buffer(part)
	if err != nil {
		return Result{}, err
	}
	op := collective.Op{Kind: s.kind, Dst: big, Src: small}
	opName, dtName := "all_gather", "fp8"
	if s.elSize == 2 {
		dtName = "bf16"
	}
	if s.kind == collective.OpReduceScatter {
		op = collective.Op{Kind: s.kind, Dst: small, Src: big, DType: s.dt, Reduce: s.red}
		opName, dtName = "reduce_scatter_"+s.red.String(), s.dt.String()
	}
	sec, err := b.time(ctx, s.comm, op)
	b.dev.Free(cuda.DevicePtr(big.Ptr))
	b.dev.Free(cuda.DevicePtr(small.Ptr))
	if err != nil {
		return Result{}, fmt.Errorf("%s: %w", s.name, err)
	}
	algbw := float64(full) / sec / 1e9
	return Result{Name: s.name, Op: opName, DType: dtName, Ranks: n, Bytes: int64(full), TimeMS: sec * 1e3,
		AlgBWGBps: algbw, BusBWGBps: algbw * float64(n-1) / float64(n), Backend: "distopt"}, nil
}

// writeResults writes results to path as JSON lines.
func writeResults(path string, results []Result) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for _, r := range results {
		enc.Encode(r)
	}
	return f.Close()
}

// buffer allocates n zeroed bytes on the rank's GPU.
func (b *bench) buffer(n int) (buffer.DeviceBuffer, error) {
	p, err := b.dev.Alloc(n)
	if err != nil {
		return buffer.DeviceBuffer{}, err
	}
	s, err := b.dev.NewStream()
	if err != nil {
		return buffer.DeviceBuffer{}, err
	}
	defer s.Destroy()
	if err := s.Memset8(p, 0, n); err != nil {
		return buffer.DeviceBuffer{}, err
	}
	return buffer.DeviceBuffer{Ptr: uintptr(p), Size: n, Device: b.dev.Ordinal()}, s.Synchronize()
}

// time returns the median over the trials of the seconds per op.
func (b *bench) time(ctx context.Context, c *nccl.Comm, op collective.Op) (float64, error) {
	if err := b.repeat(ctx, c, op, b.warm); err != nil {
		return 0, err
	}
	var secs []float64
	for range b.trials {
		if err := collective.Barrier(ctx, c); err != nil {
			return 0, err
		}
		start := time.Now()
		if err := b.repeat(ctx, c, op, b.iters); err != nil {
			return 0, err
		}
		secs = append(secs, time.Since(start).Seconds()/float64(b.iters))
	}
	slices.Sort(secs)
	return secs[len(secs)/2], nil
}

// repeat starts k copies of op back to back and waits for all of them.
func (b *bench) repeat(ctx context.Context, c *nccl.Comm, op collective.Op, k int) error {
	works := make([]collective.Work, k)
	for i := range works {
		works[i] = c.Start(op)
	}
	for _, w := range works {
		if err := w.Wait(ctx); err != nil {
			return err
		}
	}
	return nil
}

// runLatency runs -latency on rank's communicator and writes rank 0's
// results to jsonPath.
func runLatency(ctx context.Context, b *bench, store *rendezvous.Store, ops int, jsonPath string) error {
	if store.Rank() == 0 {
		fmt.Printf("# distopt-ncclbench -latency: %d ranks, %v, GPU %s\n", store.Size(), b.plain.Library(), b.dev.Info().Name)
	}
	var f *os.File
	if store.Rank() == 0 && jsonPath != "" {
		var err error
		if f, err = os.Create(jsonPath); err != nil {
			return err
		}
		defer f.Close()
	}
	var w io.Writer
	if f != nil {
		w = f
	}
	if err := latency(ctx, b.dev, store, b.plain, ops, w); err != nil {
		return err
	}
	if err := collective.Barrier(ctx, b.plain); err != nil {
		return err
	}
	if f != nil {
		return f.Close()
	}
	return nil
}
