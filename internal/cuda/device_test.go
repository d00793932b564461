//go:build linux

package cuda_test

import (
	"bytes"
	_ "embed"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/cuda/cudatest"
)

//go:embed testdata/test_kernels.ptx
var testPTX []byte

func TestDevices(t *testing.T) {
	d := cudatest.Require(t)
	v, err := cuda.DriverVersion()
	if err != nil || v < 11080 {
		t.Errorf("DriverVersion() = %d, %v; want >= 11080", v, err)
	}
	infos, err := cuda.Devices()
	if err != nil {
		t.Fatalf("Devices: %v", err)
	}
	for _, i := range infos {
		t.Logf("driver CUDA %d.%d, device %v", v/1000, v%1000/10, i)
		if i.Name == "" || i.PCIBusID == "" || i.Major < 7 || i.TotalMemory == 0 || i.Multiprocessors == 0 ||
			i.MaxThreadsPerBlock < 1024 || i.L2CacheBytes == 0 || i.MaxSharedMemoryPerBlock < 48<<10 {
			t.Errorf("implausible device info %+v", i)
		}
	}
	if d.Info() != infos[0] {
		t.Errorf("Info() = %+v, Devices()[0] = %+v", d.Info(), infos[0])
	}
	free, total, err := d.MemInfo()
	if err != nil || free == 0 || free > total || total != infos[0].TotalMemory {
		t.Errorf("MemInfo() = %d, %d, %v (TotalMemory %d)", free, total, err, infos[0].TotalMemory)
	}
}

// randomBytes returns n reproducible random bytes.
func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestCopiesAndMemset(t *testing.T) {
	d := cudatest.Require(t)
	s := cudatest.Stream(t, d)
	for _, n := range []int{1, 3, 4096, 1000003} {
		src := randomBytes(n, uint64(n))
		a, b := cudatest.Alloc(t, d, n), cudatest.Alloc(t, d, n+64)
		if err := s.Upload(a, src); err != nil {
			t.Fatalf("Upload: %v", err)
		}
		// b = [0xa5 x 64][src], written with Memset8 and an offset copy.
		if err := s.Memset8(b, 0xa5, 64); err != nil {
			t.Fatalf("Memset8: %v", err)
		}
		if err := s.CopyDtoD(b.Add(64), a, n); err != nil {
			t.Fatalf("CopyDtoD: %v", err)
		}
		got := make([]byte, n+64)
		if err := s.Download(got, b); err != nil {
			t.Fatalf("Download: %v", err)
		}
		if !bytes.Equal(got[:64], bytes.Repeat([]byte{0xa5}, 64)) || !bytes.Equal(got[64:], src) {
			t.Errorf("n=%d: round trip differs", n)
		}
		if n >= 16 {
			if err := s.Memset32(a, 0xdeadbeef, n/4); err != nil {
				t.Fatalf("Memset32: %v", err)
			}
			words := make([]uint32, n/4)
			if err := s.Download(cuda.Bytes(words), a); err != nil {
				t.Fatalf("Download: %v", err)
			}
			for i, w := range words {
				if w != 0xdeadbeef {
					t.Fatalf("n=%d: word %d = %#x after Memset32", n, i, w)
				}
			}
		}
	}
}

func TestUsage(t *testing.T) {
	d := cudatest.Require(t)
	p, err := d.Alloc(1000)
	if err != nil {
		t.Fatal(err)
	}
	h, err := d.AllocHost(4096)
	if err != nil {
		t.Fatal(err)
	}
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	e, err := d.NewEvent(false)
	if err != nil {
		t.Fatal(err)
	}
	want := cuda.Usage{DeviceBytes: 1000, DeviceAllocs: 1, HostBytes: 4096, HostAllocs: 1, Streams: 1, Events: 1}
	if u := d.Usage(); u != want {
		t.Errorf("Usage() = %+v, want %+v", u, want)
	}
	for _, err := range []error{d.Free(p), h.Free(), s.Destroy(), e.Destroy()} {
		if err != nil {
			t.Error(err)
		}
	}
	if u := d.Usage(); u != (cuda.Usage{}) {
		t.Errorf("Usage() after release = %+v", u)
	}
}

func TestPinnedAsync(t *testing.T) {
	d := cudatest.Require(t)
	const n = 1 << 24
	s := cudatest.Stream(t, d)
	in, out := cudatest.AllocHost(t, d, n), cudatest.AllocHost(t, d, n)
	copy(in.Bytes(), randomBytes(n, 7))
	p := cudatest.Alloc(t, d, n)
	if err := s.CopyHtoD(p, in.Bytes()); err != nil {
		t.Fatal(err)
	}
	if err := s.CopyDtoH(out.Bytes()[:n/2], p); err != nil {
		t.Fatal(err)
	}
	if err := s.CopyDtoH(out.Bytes()[n/2:], p.Add(n/2)); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(in.Bytes(), out.Bytes()) {
		t.Error("pinned round trip differs")
	}
	if got := cuda.View[uint32](out.Bytes()[:8]); len(got) != 2 || got[0] != binary.LittleEndian.Uint32(in.Bytes()) {
		t.Errorf("View = %v", got)
	}
	// Go memory must be refused by the asynchronous copies.
	goMem := make([]byte, 16)
	for name, f := range map[string]func(){
		"CopyHtoD": func() { s.CopyHtoD(p, goMem) },
		"CopyDtoH": func() { s.CopyDtoH(goMem, p) },
	} {
		if !panics(f) {
			t.Errorf("%s with Go memory did not panic", name)
		}
	}
}

func TestStreamsAndEvents(t *testing.T) {
	d := cudatest.Require(t)
	const n = 256 << 20
	s1, s2 := cudatest.Stream(t, d), cudatest.Stream(t, d)
	a, b := cudatest.Alloc(t, d, n), cudatest.Alloc(t, d, n)
	start, mid := cudatest.Event(t, d, true), cudatest.Event(t, d, true)
	untimed := cudatest.Event(t, d, false)
	if err := s2.Memset8(b, 0, n); err != nil {
		t.Fatal(err)
	}
	if err := s2.Synchronize(); err != nil {
		t.Fatal(err)
	}
	// s1 fills a; s2 copies a to b only after s1's event.
	must(t, start.Record(s1))
	must(t, s1.Memset8(a, 0x5a, n))
	must(t, mid.Record(s1))
	must(t, untimed.Record(s1))
	must(t, s2.Wait(mid))
	must(t, s2.CopyDtoD(b, a, n))
	must(t, s2.Synchronize())
	if done, err := mid.Query(); !done || err != nil {
		t.Errorf("Query after the waiting stream finished = %v, %v", done, err)
	}
	if done, err := s1.Query(); !done || err != nil {
		t.Errorf("Stream.Query = %v, %v", done, err)
	}
	got := make([]byte, n)
	must(t, s2.Download(got, b))
	if c := bytes.Count(got, []byte{0x5a}); c != n {
		t.Errorf("%d bytes of %d copied as 0x5a: the stream did not wait", c, n)
	}
	el, err := cuda.Elapsed(start, mid)
	if err != nil || el <= 0 {
		t.Errorf("Elapsed = %v, %v", el, err)
	}
	t.Logf("memset of %d MiB: %v (%.0f GB/s)", n>>20, el, float64(n)/el.Seconds()/1e9)
	if _, err := cuda.Elapsed(start, untimed); err == nil {
		t.Error("Elapsed with an untimed event succeeded")
	}
}

func TestLaunch(t *testing.T) {
	d := cudatest.Require(t)
	m, err := d.LoadModule(testPTX)
	if err != nil {
		t.Fatalf("LoadModule: %v", err)
	}
	t.Cleanup(func() { m.Unload() })
	s := cudatest.Stream(t, d)

	t.Run("arguments at their sizes", func(t *testing.T) {
		f := function(t, m, "pack_args")
		out := cudatest.Alloc(t, d, 40)
		var a cuda.Args
		a.Ptr(out).U32(0x89abcdef).U64(0x0123456789abcdef).F32(-3.75).I32(-123456).F64(math.Pi).Ptr(0xfeedface12)
		must(t, s.Launch(f, cuda.Dim3{X: 1}, cuda.Dim3{X: 1}, 0, &a))
		got := make([]byte, 40)
		must(t, s.Download(got, out))
		le := binary.LittleEndian
		if le.Uint32(got) != 0x89abcdef || le.Uint64(got[8:]) != 0x0123456789abcdef ||
			math.Float32frombits(le.Uint32(got[16:])) != -3.75 || int32(le.Uint32(got[20:])) != -123456 ||
			math.Float64frombits(le.Uint64(got[24:])) != math.Pi || le.Uint64(got[32:]) != 0xfeedface12 {
			t.Errorf("kernel saw % x", got)
		}
	})

	t.Run("grid", func(t *testing.T) {
		f := function(t, m, "index")
		const n = 1000003
		out := cudatest.Alloc(t, d, 4*n)
		must(t, s.Launch(f, cuda.Dim3{X: (n + 255) / 256}, cuda.Dim3{X: 256}, 0, new(cuda.Args).Ptr(out).U32(n).U32(17)))
		got := make([]uint32, n)
		must(t, s.Download(cuda.Bytes(got), out))
		for i, v := range got {
			if v != uint32(i)+17 {
				t.Fatalf("out[%d] = %d, want %d", i, v, i+17)
			}
		}
		regs, err := f.Attribute(cuda.FuncNumRegs)
		if err != nil || regs <= 0 {
			t.Errorf("FuncNumRegs = %d, %v", regs, err)
		}
	})

	t.Run("bad block", func(t *testing.T) {
		f := function(t, m, "index")
		out := cudatest.Alloc(t, d, 4)
		err := s.Launch(f, cuda.Dim3{X: 1}, cuda.Dim3{X: 4096}, 0, new(cuda.Args).Ptr(out).U32(1).U32(0))
		var ce *cuda.Error
		if !errors.As(err, &ce) || ce.Code != cuda.ErrorInvalidVal || !strings.Contains(err.Error(), "index") {
			t.Errorf("launch with 4096 threads per block: %v", err)
		}
		must(t, s.Synchronize()) // not sticky
	})

	t.Run("missing kernel", func(t *testing.T) {
		_, err := m.Function("no_such_kernel")
		var ce *cuda.Error
		if !errors.As(err, &ce) || ce.Code != cuda.ErrorNotFound || ce.Name != "CUDA_ERROR_NOT_FOUND" {
			t.Errorf("Function(no_such_kernel) = %v", err)
		}
	})
}

func TestLoadModuleError(t *testing.T) {
	d := cudatest.Require(t)
	bad := []byte(".version 7.8\n.target sm_80\n.address_size 64\n.visible .entry k() { bogus.instruction %r1; ret; }\n")
	m, err := d.LoadModule(bad)
	var ce *cuda.Error
	if m != nil || !errors.As(err, &ce) {
		t.Fatalf("LoadModule(bad) = %v, %v", m, err)
	}
	t.Logf("JIT error: %v", err)
	if ce.Name == "" || ce.Detail == "" {
		t.Errorf("error %+v lacks the code name or the JIT log", ce)
	}
}

func TestWorkerThread(t *testing.T) {
	d := cudatest.Require(t)
	var mu sync.Mutex
	tids := map[int]bool{}
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for range 20 {
				err := d.Do(func() error {
					mu.Lock()
					tids[syscall.Gettid()] = true
					mu.Unlock()
					// Calls from inside Do run directly (no deadlock).
					p, err := d.Alloc(256)
					if err != nil {
						return err
					}
					return d.Free(p)
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if len(tids) != 1 {
		t.Errorf("Do ran on %d OS threads, want 1", len(tids))
	}
	// A panic inside Do comes back to the caller, and the worker survives.
	var got any
	func() {
		defer func() { got = recover() }()
		d.Do(func() error { panic("boom") })
	}()
	if got != "boom" {
		t.Errorf("recovered %v, want boom", got)
	}
	must(t, d.Synchronize())
}

func TestClose(t *testing.T) {
	cudatest.Require(t) // skips or fails without a GPU
	d, err := cuda.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	must(t, d.Close())
	if err := d.Close(); !errors.Is(err, cuda.ErrClosed) {
		t.Errorf("second Close = %v", err)
	}
	if _, err := d.Alloc(16); !errors.Is(err, cuda.ErrClosed) {
		t.Errorf("Alloc after Close = %v", err)
	}
	if _, err := cuda.Open(1 << 20); !errors.Is(err, cuda.ErrNoDevice) {
		t.Errorf("Open(huge ordinal) = %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func panics(f func()) (p bool) {
	defer func() { p = recover() != nil }()
	f()
	return false
}

func function(t *testing.T, m *cuda.Module, name string) *cuda.Function {
	t.Helper()
	f, err := m.Function(name)
	must(t, err)
	return f
}
