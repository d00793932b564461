package nccl_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/cuda/cudatest"
	"github.com/distopt/distopt/internal/nccl"
)

// TestDefault opens the system's NCCL on a GPU machine and reports it.
func TestDefault(t *testing.T) {
	_, err := cuda.DeviceCount()
	cudatest.Unavailable(t, err)
	lib, err := nccl.Default()
	cudatest.Unavailable(t, err, nccl.ErrNoLibrary)
	if lib.Version().Less(nccl.MinVersion) {
		t.Fatalf("Default accepted %v", lib)
	}
	t.Logf("%v", lib)
}

// TestTwoRanksOneProcess drives a 2-rank communicator from one process, one
// device worker per GPU, through the raw binding: non-blocking init, an
// all-reduce, a reduce-scatter, an all-gather and a broadcast, checked
// element by element, then finalize and destroy.
func TestTwoRanksOneProcess(t *testing.T) {
	n, err := cuda.DeviceCount()
	cudatest.Unavailable(t, err)
	if n < 2 {
		cudatest.Unavailable(t, errors.Join(cuda.ErrNoDevice, errors.New("the test needs 2 GPUs")))
	}
	lib, err := nccl.Default()
	cudatest.Unavailable(t, err, nccl.ErrNoLibrary)
	devs := cudatest.RequireDevices(t, 2)
	var id nccl.UniqueID
	if err := devs[0].Do(func() error { id, err = lib.UniqueID(); return err }); err != nil {
		t.Fatal(err)
	}
	comms := make([]*nccl.Comm, 2)
	for r, d := range devs {
		err := d.Do(func() error {
			var err error
			comms[r], err = lib.InitRank(2, id, r, nccl.Config{})
			if errors.Is(err, nccl.ErrInProgress) {
				return nil
			}
			return err
		})
		if err != nil {
			t.Fatalf("rank %d: InitRank: %v", r, err)
		}
	}
	settle(t, devs, comms, "init")
	for r, d := range devs {
		d.Do(func() error {
			for _, q := range []struct {
				name string
				f    func() (int, error)
				want int
			}{{"Count", comms[r].Count, 2}, {"UserRank", comms[r].UserRank, r}, {"CuDevice", comms[r].CuDevice, d.Ordinal()}} {
				if got, err := q.f(); err != nil || got != q.want {
					t.Errorf("rank %d: %s = %d, %v; want %d", r, q.name, got, err, q.want)
				}
			}
			return nil
		})
	}

	const count = 1031 // float32 elements per rank of the reduce-scatter output
	streams := make([]*cuda.Stream, 2)
	bufs := make([]cuda.DevicePtr, 2)
	for r, d := range devs {
		s, err := d.NewStream()
		if err != nil {
			t.Fatal(err)
		}
		streams[r] = s
		defer s.Destroy()
		if bufs[r], err = d.Alloc(4 * 2 * count * 3); err != nil {
			t.Fatal(err)
		}
		defer d.Free(bufs[r])
	}
	// Layout per rank: a = 2*count floats (all-reduce in place, then the
	// reduce-scatter source), b = 2*count floats (gather/broadcast target).
	in := func(r, i int) float32 { return float32(r*100000 + i) }
	for r := range devs {
		x := make([]float32, 2*count)
		for i := range x {
			x[i] = in(r, i)
		}
		if err := streams[r].Upload(bufs[r], cuda.Bytes(x)); err != nil {
			t.Fatal(err)
		}
	}
	a := func(r int) uintptr { return uintptr(bufs[r]) }
	b := func(r int) uintptr { return uintptr(bufs[r]) + 4*2*count }
	c := func(r int) uintptr { return uintptr(bufs[r]) + 4*4*count }
	steps := []struct {
		name string
		call func(r int) error
	}{
		{"all-reduce", func(r int) error {
			return comms[r].AllReduce(a(r), a(r), 2*count, nccl.Float32, nccl.Sum, streams[r].Handle())
		}},
		{"reduce-scatter", func(r int) error {
			return comms[r].ReduceScatter(a(r), c(r), count, nccl.Float32, nccl.Max, streams[r].Handle())
		}},
		{"all-gather", func(r int) error { return comms[r].AllGather(c(r), b(r), 4*count, nccl.Uint8, streams[r].Handle()) }},
		{"broadcast", func(r int) error { return comms[r].Broadcast(b(r), b(r), 4*count, nccl.Uint8, 1, streams[r].Handle()) }},
	}
	for _, s := range steps {
		// Group state is per thread: each rank's call is a group of its own
		// on its device's worker.
		for r, d := range devs {
			err := d.Do(func() error {
				if err := lib.GroupStart(); err != nil {
					return err
				}
				callErr := s.call(r)
				if err := lib.GroupEnd(); !errors.Is(err, nccl.ErrInProgress) {
					return errors.Join(callErr, err)
				}
				return callErr
			})
			if err != nil {
				t.Fatalf("%s on rank %d: %v", s.name, r, err)
			}
		}
		settle(t, devs, comms, s.name)
	}
	for r := range devs {
		if err := streams[r].Synchronize(); err != nil {
			t.Fatal(err)
		}
		got := make([]float32, 2*count)
		if err := streams[r].Download(cuda.Bytes(got), cuda.DevicePtr(b(r))); err != nil {
			t.Fatal(err)
		}
		// b = all-gather of the max over ranks of the summed blocks: every
		// element is the sum, in[0][i] + in[1][i], which is exact.
		for i, v := range got {
			if want := in(0, i) + in(1, i); v != want || math.IsNaN(float64(v)) {
				t.Fatalf("rank %d: element %d = %v, want %v", r, i, v, want)
			}
		}
	}
	for r, d := range devs {
		if err := d.Do(comms[r].Finalize); err != nil && !errors.Is(err, nccl.ErrInProgress) {
			t.Fatalf("rank %d: Finalize: %v", r, err)
		}
	}
	settle(t, devs, comms, "finalize")
	for r, d := range devs {
		if err := d.Do(comms[r].Destroy); err != nil {
			t.Errorf("rank %d: Destroy: %v", r, err)
		}
	}
}

// settle polls both communicators until neither is in progress.
func settle(t *testing.T, devs []*cuda.Device, comms []*nccl.Comm, what string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for r, d := range devs {
		for {
			err := d.Do(comms[r].AsyncError)
			if err == nil {
				break
			}
			if !errors.Is(err, nccl.ErrInProgress) {
				t.Fatalf("%s: rank %d: %v", what, r, err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: rank %d still in progress after a minute", what, r)
			}
			time.Sleep(time.Millisecond)
		}
	}
}
