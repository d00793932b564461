package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/optimizer/backend"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/grpccomm"
	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/collective/nccl"
	"github.com/distopt/distopt/collective/rendezvous"
	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/optimizer/gpu"
)

// job is what one rank runs with.
type job struct {
	rank, size int
	localSize  int // ranks on this host (they share its CPUs)
	comm       collective.Communicator
	be         backend.Backend
	dev        *cuda.Device      // the GPU; nil on the CPU backend
	store      *rendezvous.Store // nil for in-process ranks
	mem        *gpuMemory        // nil without a GPU or NVML
	memNote    string            // why mem is nil
	// NVML samples taken while setting up: after the backend (CUDA context,
	// kernels, stream) and after the communicator and a warm-up of every
	// collective the step uses (NCCL's buffers and connections).
	afterContext, afterComm int64
	closers                 []func() error // run in reverse order by close
}

// close releases what the job opened, last first.
func (j *job) close() error {
	var errs []error
	for i := len(j.closers) - 1; i >= 0; i-- {
		errs = append(errs, j.closers[i]())
	}
	return errors.Join(errs...)
}

// sample returns this rank's NVML-measured device memory (0 without NVML).
func (j *job) sample() int64 {
	if j.mem == nil {
		return 0
	}
	u, _, err := j.mem.used()
	if err != nil {
		return 0
	}
	return u
}

// launchedJob sets up this process's rank of a job started by the distopt
// launcher (or torchrun): the rendezvous store, and either GPU LOCAL_RANK
// with the CUDA backend and an NCCL communicator that orders itself after
// the backend's stream, or the CPU backend with the gRPC communicator.
// log receives notes (NVML missing).
func launchedJob(ctx context.Context, backend string, workers int, log io.Writer) (_ *job, err error) {
	rc, err := rendezvous.FromEnv()
	if err != nil {
		return nil, err
	}
	j := &job{rank: rc.Rank, size: rc.WorldSize, localSize: max(1, rc.LocalWorldSize)}
	defer func() {
		// j, not the result: a failed return sets the result to nil.
		if err != nil {
			err = errors.Join(err, j.close())
		}
	}()
	switch backend {
	case "gpu":
		if err := j.openGPU(rc.LocalRank, log); err != nil {
			return nil, err
		}
	case "cpu":
		j.be = cpu.New(workers)
		j.memNote = "CPU backend: no GPU memory to measure"
	default:
		return nil, fmt.Errorf("-backend=%q: want gpu or cpu", backend)
	}
	if j.store, err = rendezvous.Connect(ctx, rc); err != nil {
		return nil, err
	}
	j.closers = append(j.closers, j.store.Close)
	if backend == "gpu" {
		gb := j.be.(*gpu.Backend)
		c, err := nccl.New(ctx, nccl.Config{Store: j.store, Device: gb.Device(), Compute: gb.Stream()})
		if err != nil {
			return nil, err
		}
		j.comm = c
	} else {
		c, err := grpccomm.New(ctx, j.store, grpccomm.Config{Name: "multigpu"})
		if err != nil {
			return nil, err
		}
		j.comm = c
	}
	j.closers = append(j.closers, j.comm.Close)
	if err := warmUp(ctx, j.comm, j.be); err != nil {
		return nil, err
	}
	j.afterComm = j.sample()
	return j, nil
}

// openGPU opens NVML (before the context exists), then the CUDA backend on
// GPU ordinal.
func (j *job) openGPU(ordinal int, log io.Writer) error {
	infos, err := cuda.Devices()
	if errors.Is(err, cuda.ErrNoDriver) || errors.Is(err, cuda.ErrNoDevice) {
		return fmt.Errorf("%w: %w (-backend cpu runs without one)", gpu.ErrUnavailable, err)
	}
	if err != nil {
		return err
	}
	if ordinal < 0 || ordinal >= len(infos) {
		return fmt.Errorf("LOCAL_RANK %d, but the driver sees %d GPUs", ordinal, len(infos))
	}
	if j.mem, err = openGPUMemory(infos[ordinal].PCIBusID); err != nil {
		j.memNote = err.Error()
		fmt.Fprintf(log, "rank %d: no NVML measurements: %v\n", j.rank, err)
	} else {
		j.closers = append(j.closers, func() error { j.mem.close(); return nil })
	}
	gb, err := gpu.New(ordinal)
	if err != nil {
		return err
	}
	j.be, j.dev = gb, gb.Device()
	j.closers = append(j.closers, gb.Close)
	j.afterContext = j.sample()
	return nil
}

// inprocJobs makes n in-process ranks on the CPU backend (no launcher).
func inprocJobs(n, workers int) []*job {
	comms := inproc.New(n)
	jobs := make([]*job, n)
	for r := range jobs {
		jobs[r] = &job{rank: r, size: n, localSize: n, comm: comms[r], be: cpu.New(workers),
			memNote: "CPU backend: no GPU memory to measure"}
		jobs[r].closers = append(jobs[r].closers, comms[r].Close)
	}
	return jobs
}

// warmUp runs each kind of collective of the step once on a few bytes,
// so that the communicator has made its connections and buffers before
// the memory of the optimizer is measured: an all-gather of bytes, a
// bfloat16 reduce-scatter (Avg), and uint32 Max and int64 Sum all-reduces.
func warmUp(ctx context.Context, c collective.Communicator, be backend.Backend) (err error) {
	n := c.Size()
	var bufs []buffer.Buffer
	defer func() {
		for _, b := range bufs {
			be.Free(b)
		}
	}()
	alloc := func(size int) buffer.Buffer {
		b, aerr := be.Alloc(size)
		if aerr != nil {
			err = errors.Join(err, aerr)
			return nil
		}
		bufs = append(bufs, b)
		return b
	}
	gsrc, gdst := alloc(256), alloc(256*n)
	rsrc, rdst := alloc(2*256*n), alloc(2*256)
	amax, stats := alloc(4*64), alloc(8*8)
	if err != nil {
		return err
	}
	ops := [][]collective.Op{
		{{Kind: collective.OpAllGather, Dst: gdst, Src: gsrc}},
		{{Kind: collective.OpReduceScatter, Dst: rdst, Src: rsrc, DType: buffer.BFloat16, Reduce: collective.Avg}},
		{{Kind: collective.OpAllReduce, Dst: amax, Src: amax, DType: buffer.Uint32, Reduce: collective.Max}},
		{{Kind: collective.OpAllReduce, Dst: stats, Src: stats, DType: buffer.Int64, Reduce: collective.Sum}},
	}
	for _, g := range ops {
		if err := c.Start(g...).Wait(ctx); err != nil {
			return fmt.Errorf("warm-up %s: %w", g[0].Kind, err)
		}
	}
	return be.Sync()
}
