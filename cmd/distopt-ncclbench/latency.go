package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"time"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	cnccl "github.com/distopt/distopt/collective/nccl"
	"github.com/distopt/distopt/collective/rendezvous"
	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/nccl"
)

// Latency is one latency measurement of -latency, as written to -json.
type Latency struct {
	Name     string  `json:"name"`
	Ranks    int     `json:"ranks"`
	Ops      int     `json:"ops"`
	MedianUS float64 `json:"median_us"`
	P90US    float64 `json:"p90_us"`
	// Phases: the median of each moment of collective/nccl's Phases, in
	// µs from Start (only for the ops through collective/nccl).
	Phases map[string]float64 `json:"phases_us,omitempty"`
}

// latencyBench measures, op by op, the latency of waited collectives of
// one byte count too small to cost any transfer time.
type latencyBench struct {
	ctx   context.Context
	dev   *cuda.Device
	store *rendezvous.Store
	comm  *cnccl.Comm
	rank  int
	ranks int
	ops   int
	out   []Latency
}

// latency runs every measurement of -latency; rank 0 prints them and
// writes them to w (JSON lines) when w is not nil.
func latency(ctx context.Context, dev *cuda.Device, store *rendezvous.Store, comm *cnccl.Comm, ops int, w io.Writer) error {
	lb := &latencyBench{ctx: ctx, dev: dev, store: store, comm: comm, rank: store.Rank(), ranks: store.Size(), ops: ops}
	if lb.rank == 0 {
		fmt.Printf("# latency: %d ops per measurement, each waited before the next; µs\n", ops)
		fmt.Printf("%-34s %9s %9s\n", "measurement", "median", "p90")
	}
	// The host alone: Go's timer for a 10 µs sleep, the hop to the
	// device's worker thread.
	lb.local("go_sleep_10us", func() error { time.Sleep(10 * time.Microsecond); return nil })
	lb.local("go_gosched", func() error { runtime.Gosched(); return nil })
	if err := lb.local("device_do", func() error { return dev.Do(func() error { return nil }) }); err != nil {
		return err
	}
	buf, err := dev.Alloc(4)
	if err != nil {
		return err
	}
	defer dev.Free(buf)
	db := buffer.DeviceBuffer{Ptr: uintptr(buf), Size: 4, Device: dev.Ordinal()}
	if err := lb.distopt("distopt_barrier", collective.Op{Kind: collective.OpBarrier}); err != nil {
		return err
	}
	ar := collective.Op{Kind: collective.OpAllReduce, Dst: db, Src: db, DType: buffer.Float32, Reduce: collective.Sum}
	if err := lb.distopt("distopt_allreduce_4B", ar); err != nil {
		return err
	}
	for _, blocking := range []bool{false, true} {
		if err := lb.raw(blocking, buf); err != nil {
			return fmt.Errorf("raw NCCL (blocking %v): %w", blocking, err)
		}
	}
	if lb.rank == 0 && w != nil {
		enc := json.NewEncoder(w)
		for _, l := range lb.out {
			if err := enc.Encode(l); err != nil {
				return err
			}
		}
	}
	return nil
}

// record adds a measurement from the durations of its ops.
func (lb *latencyBench) record(name string, ds []time.Duration, phases map[string]float64) {
	l := Latency{Name: name, Ranks: lb.ranks, Ops: len(ds), MedianUS: quantileUS(ds, 0.5), P90US: quantileUS(ds, 0.9), Phases: phases}
	lb.out = append(lb.out, l)
	if lb.rank != 0 {
		return
	}
	fmt.Printf("%-34s %9.1f %9.1f", name, l.MedianUS, l.P90US)
	if len(phases) > 0 {
		fmt.Print("   phases(median µs from Start):")
		for _, k := range phaseNames {
			fmt.Printf(" %s=%.1f", k, phases[k])
		}
	}
	fmt.Println()
}

// quantileUS returns the q-quantile of ds (nearest rank) in µs.
func quantileUS(ds []time.Duration, q float64) float64 {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := min(len(s)-1, int(q*float64(len(s))))
	return float64(s[i]) / 1e3
}

// local times fn, which involves this rank only.
func (lb *latencyBench) local(name string, fn func() error) error {
	ds := make([]time.Duration, lb.ops)
	for i := range ds {
		t := time.Now()
		if err := fn(); err != nil {
			return err
		}
		ds[i] = time.Since(t)
	}
	lb.record(name, ds, nil)
	return nil
}

// phaseNames are the moments of cnccl.Phases in the order of a group.
var phaseNames = []string{"picked", "enqueued", "launched", "launch_polls", "issued", "wait_called", "completed", "wait_polls", "returned"}

// distopt times op started and waited through collective/nccl, with the
// median of each phase.
func (lb *latencyBench) distopt(name string, op collective.Op) error {
	if err := lb.repeatWaited(op, 20, nil); err != nil {
		return err
	}
	ds := make([]time.Duration, lb.ops)
	ps := make([]cnccl.Phases, lb.ops)
	if err := lb.repeatWaited(op, lb.ops, func(i int, d time.Duration, p cnccl.Phases) { ds[i], ps[i] = d, p }); err != nil {
		return err
	}
	pick := func(f func(p cnccl.Phases) time.Duration) float64 {
		v := make([]time.Duration, len(ps))
		for i, p := range ps {
			v[i] = f(p)
		}
		return quantileUS(v, 0.5)
	}
	phases := map[string]float64{
		"picked":       pick(func(p cnccl.Phases) time.Duration { return p.Picked }),
		"enqueued":     pick(func(p cnccl.Phases) time.Duration { return p.Enqueued }),
		"launched":     pick(func(p cnccl.Phases) time.Duration { return p.Launched }),
		"launch_polls": pick(func(p cnccl.Phases) time.Duration { return time.Duration(p.LaunchPolls) * time.Microsecond }),
		"issued":       pick(func(p cnccl.Phases) time.Duration { return p.Issued }),
		"wait_called":  pick(func(p cnccl.Phases) time.Duration { return p.WaitCalled }),
		"completed":    pick(func(p cnccl.Phases) time.Duration { return p.Completed }),
		"wait_polls":   pick(func(p cnccl.Phases) time.Duration { return time.Duration(p.WaitPolls) * time.Microsecond }),
		"returned":     pick(func(p cnccl.Phases) time.Duration { return p.Returned }),
	}
	lb.record(name, ds, phases)
	return nil
}

// repeatWaited starts op k times, each after the previous one's Wait, and
// reports each one's time from Start to the return of Wait.
func (lb *latencyBench) repeatWaited(op collective.Op, k int, each func(int, time.Duration, cnccl.Phases)) error {
	if err := collective.Barrier(lb.ctx, lb.comm); err != nil {
		return err
	}
	for i := range k {
		t := time.Now()
		w := lb.comm.Start(op)
		if err := w.Wait(lb.ctx); err != nil {
			return err
		}
		d := time.Since(t)
		if each != nil {
			each(i, d, w.(*cnccl.Work).Phases())
		}
	}
	return nil
}

// raw times a 4-byte all-reduce through the NCCL binding alone, on a
// communicator of its own (blocking or not), three ways: launched and
// synchronized in one hop to the device's worker (the floor: NCCL and CUDA
// only); launched, then its event polled with one hop per look and
// runtime.Gosched between looks; and the same with a 10 µs time.Sleep
// between looks (what a timer-paced wait costs). The three share one
// communicator and one buffer.
func (lb *latencyBench) raw(blocking bool, buf cuda.DevicePtr) error {
	r, err := lb.openRaw(blocking, buf)
	if err != nil {
		return err
	}
	defer r.close()
	if err := r.floor(); err != nil {
		return err
	}
	if err := lb.rawSeries(r.name+"_event_gosched", r.polled(runtime.Gosched), lb.ops); err != nil {
		return err
	}
	sleep := func() { time.Sleep(10 * time.Microsecond) }
	return lb.rawSeries(r.name+"_event_sleep10us", r.polled(sleep), lb.ops)
}

// rawComm is what raw measures with: a communicator of the NCCL binding,
// a stream, an event and the 4-byte buffer of the all-reduce.
type rawComm struct {
	lb   *latencyBench
	lib  *nccl.Library
	nc   *nccl.Comm
	s    *cuda.Stream
	ev   *cuda.Event
	buf  cuda.DevicePtr
	name string // "raw_blocking" or "raw_nonblocking"
}

// openRaw makes the communicator (blocking or not), the stream and the
// event of raw.
func (lb *latencyBench) openRaw(blocking bool, buf cuda.DevicePtr) (_ *rawComm, err error) {
	mode := "nonblocking"
	if blocking {
		mode = "blocking"
	}
	lib, err := nccl.Default()
	if err != nil {
		return nil, err
	}
	nc, err := lb.rawInit(lib, mode, blocking)
	if err != nil {
		return nil, err
	}
	r := &rawComm{lb: lb, lib: lib, nc: nc, buf: buf, name: "raw_" + mode}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	if r.s, err = lb.dev.NewStream(); err != nil {
		return nil, err
	}
	if r.ev, err = lb.dev.NewEvent(false); err != nil {
		return nil, err
	}
	return r, nil
}

// close releases the event and the stream and aborts the communicator.
func (r *rawComm) close() {
	if r.ev != nil {
		r.ev.Destroy()
	}
	if r.s != nil {
		r.s.Destroy()
	}
	r.lb.dev.Do(r.nc.Abort)
}

// launch queues the all-reduce and returns once NCCL has put it on the
// stream, on the worker, with the time until ncclGroupEnd returned and the
// looks at ncclCommGetAsyncError after it.
func (r *rawComm) launch() (groupEnd time.Duration, polls int, err error) {
	t := time.Now()
	if err := r.lib.GroupStart(); err != nil {
		return 0, 0, err
	}
	callErr := r.nc.AllReduce(uintptr(r.buf), uintptr(r.buf), 1, nccl.Float32, nccl.Sum, r.s.Handle())
	err = errors.Join(callErr, r.lib.GroupEnd())
	groupEnd = time.Since(t)
	for errors.Is(err, nccl.ErrInProgress) {
		polls++
		err = r.nc.AsyncError()
	}
	return groupEnd, polls, err
}

// floor times launch and cuStreamSynchronize in one hop to the worker;
// rank 0 also prints when ncclGroupEnd returned and when the launch was
// done.
func (r *rawComm) floor() error {
	lb := r.lb
	var ge, lt, polls []time.Duration
	once := func() (time.Duration, error) {
		t := time.Now()
		err := lb.dev.Do(func() error {
			g, p, err := r.launch()
			if err != nil {
				return err
			}
			ge, polls = append(ge, g), append(polls, time.Duration(p)*time.Microsecond)
			lt = append(lt, time.Since(t))
			return r.s.Synchronize()
		})
		return time.Since(t), err
	}
	if err := lb.rawSeries(r.name+"_sync", once, 20); err != nil {
		return err
	}
	ge, lt, polls = nil, nil, nil
	if err := lb.rawSeries(r.name+"_sync", once, lb.ops); err != nil {
		return err
	}
	if lb.rank == 0 {
		fmt.Printf("%-34s %9.1f %9s   (ncclGroupEnd return; launched: %.1f µs, %.0f looks at ncclCommGetAsyncError)\n",
			"  "+r.name+"_groupend", quantileUS(ge, 0.5), "", quantileUS(lt, 0.5), quantileUS(polls, 0.5))
	}
	return nil
}

// polled returns a call of the series that launches the all-reduce,
// records the event after it in the same hop, and polls the event from
// this goroutine, one hop per look, calling pause between looks.
func (r *rawComm) polled(pause func()) func() (time.Duration, error) {
	return func() (time.Duration, error) {
		t := time.Now()
		err := r.lb.dev.Do(func() error {
			if _, _, err := r.launch(); err != nil {
				return err
			}
			return r.ev.Record(r.s)
		})
		for err == nil {
			var done bool
			if done, err = r.ev.Query(); done {
				break
			}
			pause()
		}
		return time.Since(t), err
	}
}

// rawSeries times k calls of once after a barrier; it records them unless
// k is the warm-up count.
func (lb *latencyBench) rawSeries(name string, once func() (time.Duration, error), k int) error {
	if err := collective.Barrier(lb.ctx, lb.comm); err != nil {
		return err
	}
	ds := make([]time.Duration, k)
	for i := range ds {
		d, err := once()
		if err != nil {
			return err
		}
		ds[i] = d
	}
	if k == lb.ops {
		lb.record(name, ds, nil)
	}
	return nil
}

// rawInit builds a communicator of every rank through the binding, the
// unique id travelling through the store.
func (lb *latencyBench) rawInit(lib *nccl.Library, mode string, blocking bool) (*nccl.Comm, error) {
	var id nccl.UniqueID
	key := "distopt-ncclbench/latency/" + mode
	if lb.rank == 0 {
		err := lb.dev.Do(func() error {
			var err error
			id, err = lib.UniqueID()
			return err
		})
		if err != nil {
			return nil, err
		}
		if err := lb.store.Set(lb.ctx, key, id[:]); err != nil {
			return nil, err
		}
	} else {
		vals, err := lb.store.Wait(lb.ctx, key)
		if err != nil {
			return nil, err
		}
		copy(id[:], vals[0])
	}
	var nc *nccl.Comm
	err := lb.dev.Do(func() error {
		var err error
		nc, err = lib.InitRank(lb.ranks, id, lb.rank, nccl.Config{Blocking: blocking})
		return err
	})
	for errors.Is(err, nccl.ErrInProgress) {
		time.Sleep(time.Millisecond)
		err = lb.dev.Do(nc.AsyncError)
	}
	if err != nil {
		if nc != nil {
			lb.dev.Do(nc.Abort)
		}
		return nil, err
	}
	return nc, nil
}
