package cuda_test

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/cuda/cudatest"
	"github.com/distopt/distopt/internal/cudalink"
)

// indexPTX holds index(out, n, bias): out[i] = i + bias for i < n.
const indexPTX = `.version 7.8
.target sm_80
.address_size 64

.visible .entry index(.param .u64 out, .param .u32 n, .param .u32 bias)
{
	.reg .pred %p;
	.reg .b32 %r<6>;
	.reg .b64 %rd<4>;
	mov.u32 %r1, %ctaid.x;
	mov.u32 %r2, %ntid.x;
	mov.u32 %r3, %tid.x;
	mad.lo.s32 %r4, %r1, %r2, %r3;
	ld.param.u32 %r5, [n];
	setp.ge.u32 %p, %r4, %r5;
	@%p bra DONE;
	ld.param.u32 %r5, [bias];
	add.s32 %r5, %r5, %r4;
	ld.param.u64 %rd1, [out];
	cvta.to.global.u64 %rd1, %rd1;
	mul.wide.u32 %rd2, %r4, 4;
	add.s64 %rd3, %rd1, %rd2;
	st.global.u32 [%rd3], %r5;
DONE:
	ret;
}
`

// open opens GPU 0 and a stream on it for the test, or skips it.
func open(t *testing.T) (*cuda.Device, *cuda.Stream) {
	t.Helper()
	d, err := cuda.Open(0)
	cudatest.Unavailable(t, err)
	s, err := d.NewStream()
	if err != nil {
		d.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := errors.Join(s.Destroy(), d.Close()); err != nil {
			t.Error(err)
		}
	})
	return d, s
}

// TestLaunch runs index over a buffer larger than its grid covers and checks
// every word against the loop it computes; words past n keep their fill.
func TestLaunch(t *testing.T) {
	d, s := open(t)
	m, err := d.LoadModule([]byte(indexPTX))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unload()
	f, err := m.Function("index")
	if err != nil {
		t.Fatal(err)
	}
	const words, n, bias = 1000, 777, 5
	p, err := d.Alloc(4 * words)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free(p)
	if err := s.Memset32(p, 0xdeadbeef, words); err != nil {
		t.Fatal(err)
	}
	start, _ := d.NewEvent(true)
	end, _ := d.NewEvent(true)
	start.Record(s)
	if err := s.Launch(f, cuda.Dim3{X: (n + 127) / 128}, cuda.Dim3{X: 128}, 0, new(cuda.Args).Ptr(p).U32(n).U32(bias)); err != nil {
		t.Fatal(err)
	}
	end.Record(s)
	got := make([]byte, 4*words)
	if err := s.Download(got, p); err != nil {
		t.Fatal(err)
	}
	for i := range words {
		want := uint32(0xdeadbeef)
		if i < n {
			want = uint32(i + bias)
		}
		if v := binary.LittleEndian.Uint32(got[4*i:]); v != want {
			t.Fatalf("word %d = %#x, want %#x", i, v, want)
		}
	}
	if dt, err := cuda.Elapsed(start, end); err != nil || dt < 0 {
		t.Errorf("Elapsed = %v, %v", dt, err)
	}
}

// TestHandlesAreStable checks that a handle handed back through the module's
// internal packages is the one the caller holds.
func TestHandlesAreStable(t *testing.T) {
	d, s := open(t)
	if s.Device() != d {
		t.Error("Stream.Device is not the device that made the stream")
	}
	if cudalink.PublicDevice(cudalink.Device(d)) != d || cudalink.PublicStream(cudalink.Stream(s)) != s {
		t.Error("a round trip through internal/cuda changed the handle")
	}
}

// TestCopies round-trips bytes through device memory at an offset.
func TestCopies(t *testing.T) {
	d, s := open(t)
	src := make([]byte, 301)
	for i := range src {
		src[i] = byte(i*7 + 3)
	}
	a, _ := d.Alloc(len(src))
	b, _ := d.Alloc(len(src) + 16)
	defer d.Free(a)
	defer d.Free(b)
	if err := s.Upload(a, src); err != nil {
		t.Fatal(err)
	}
	if err := s.Memset8(b, 0, len(src)+16); err != nil {
		t.Fatal(err)
	}
	if err := s.CopyDtoD(b.Add(16), a, len(src)); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(src)+16)
	if err := s.Download(got, b); err != nil {
		t.Fatal(err)
	}
	for i, v := range got {
		want := byte(0)
		if i >= 16 {
			want = src[i-16]
		}
		if v != want {
			t.Fatalf("byte %d = %d, want %d", i, v, want)
		}
	}
}

// TestUsage counts an allocation and a host wait, and finds the open device
// among Devices.
func TestUsage(t *testing.T) {
	d, s := open(t)
	before, syncs := d.Usage(), d.HostSyncs()
	p, err := d.Alloc(1000)
	if err != nil {
		t.Fatal(err)
	}
	u := d.Usage()
	if u.DeviceBytes-before.DeviceBytes != 1000 || u.DeviceAllocs-before.DeviceAllocs != 1 {
		t.Errorf("after Alloc(1000): %+v, before %+v", u, before)
	}
	if err := errors.Join(s.Synchronize(), d.Free(p)); err != nil {
		t.Fatal(err)
	}
	if d.HostSyncs() <= syncs {
		t.Errorf("HostSyncs %d after a Synchronize, %d before", d.HostSyncs(), syncs)
	}
	if d.Usage() != before {
		t.Errorf("after Free: %+v, want %+v", d.Usage(), before)
	}
	infos, err := cuda.Devices()
	if err != nil || len(infos) <= d.Ordinal() || infos[d.Ordinal()] != d.Info() {
		t.Errorf("Devices = %v, %v; want %v among them", infos, err, d.Info())
	}
}

// TestDevicesWithoutGPU: on a host without a GPU, Devices says why with
// ErrNoDriver or ErrNoDevice.
func TestDevicesWithoutGPU(t *testing.T) {
	infos, err := cuda.Devices()
	if err == nil {
		t.Skipf("this host has %d GPUs", len(infos))
	}
	if !errors.Is(err, cuda.ErrNoDriver) && !errors.Is(err, cuda.ErrNoDevice) {
		t.Errorf("Devices: %v, want ErrNoDriver or ErrNoDevice", err)
	}
}
