//go:build gorgonia

package cuinterop_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"
	"unsafe"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer/cpu"

	"gorgonia.org/cu"

	"github.com/distopt/distopt/collective/single"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/internal/cuda/cudatest"
	cuinterop "github.com/distopt/distopt/interop/gorgonia"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/gpu"
)

// gorgonia.org/cu's package init exits the process on a host without a GPU,
// so these tests only ever run on a GPU machine (scripts/gpu/build_interop.sh
// builds them); the first ones need no GPU but share the binary.

func open(t *testing.T) *gpu.Backend {
	t.Helper()
	b, err := gpu.New(0)
	cudatest.Unavailable(t, err, gpu.ErrUnavailable)
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	})
	return b
}

// otherBuffer is a device buffer type that the package does not know.
type otherBuffer struct{}

func (otherBuffer) Len() int                     { return 1 }
func (otherBuffer) Memory() buffer.MemoryKind    { return buffer.Device }
func (otherBuffer) Slice(int, int) buffer.Buffer { return otherBuffer{} }

func TestBuffers(t *testing.T) {
	for _, c := range []struct {
		name    string
		b       buffer.Buffer
		ptr     cu.DevicePtr
		dev     cu.Device
		wantErr error
	}{
		{"wrapped", cuinterop.FromDevicePtr(0x7f0012345600, 4096, 3), 0x7f0012345600, 3, nil},
		{"slice", cuinterop.FromDevicePtr(0x7f0012345600, 4096, 1).Slice(100, 200), 0x7f0012345600 + 100, 1, nil},
		{"empty", buffer.DeviceBuffer{Device: 2}, 0, 2, nil},
		{"host", buffer.HostBuffer(make([]byte, 8)), 0, 0, cuinterop.ErrHostMemory},
		{"nil", nil, 0, 0, cuinterop.ErrBufferType},
		{"foreign", otherBuffer{}, 0, 0, cuinterop.ErrBufferType},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := cuinterop.DevicePtr(c.b)
			d, derr := cuinterop.Device(c.b)
			if !errors.Is(err, c.wantErr) || !errors.Is(derr, c.wantErr) {
				t.Fatalf("errors %v, %v; want %v", err, derr, c.wantErr)
			}
			if err == nil && (p != c.ptr || d != c.dev) {
				t.Errorf("got %v on %d, want %v on %d", p, d, c.ptr, c.dev)
			}
		})
	}
	if got := cuinterop.FromDevicePtr(0x1000, 12, 5); got != (buffer.DeviceBuffer{Ptr: 0x1000, Size: 12, Device: 5}) {
		t.Errorf("FromDevicePtr = %+v", got)
	}
	defer func() {
		if recover() == nil {
			t.Error("FromDevicePtr of -1 bytes did not panic")
		}
	}()
	cuinterop.FromDevicePtr(0x1000, -1, 0)
}

func TestViews(t *testing.T) {
	hp := optimizer.ParamView{Name: "b", HighPrecision: true, Data: buffer.DeviceBuffer{Ptr: 0x2000, Size: 40}}
	if _, _, err := cuinterop.ScaleInvPtr(hp); !errors.Is(err, cuinterop.ErrNoScale) {
		t.Errorf("ScaleInvPtr of a high-precision view: %v, want ErrNoScale", err)
	}
	if p, n, err := cuinterop.ParamPtr(hp); err != nil || p != 0x2000 || n != 40 {
		t.Errorf("ParamPtr = %v, %d, %v", p, n, err)
	}
	host := optimizer.GradView{Name: "w", Data: buffer.HostBuffer(make([]byte, 6))}
	if _, _, err := cuinterop.GradPtr(host); !errors.Is(err, cuinterop.ErrHostMemory) {
		t.Errorf("GradPtr of a host view: %v, want ErrHostMemory", err)
	}
}

func TestHandles(t *testing.T) {
	for _, h := range []uintptr{0, 1, 0x5566778899aa, math.MaxUint64 &^ 7} {
		if got := cuinterop.FromStream(cuinterop.ToStream(h)); got != h {
			t.Errorf("stream %#x came back as %#x", h, got)
		}
		if got := cuinterop.FromEvent(cuinterop.ToEvent(h)); got != h {
			t.Errorf("event %#x came back as %#x", h, got)
		}
	}
	if cuinterop.FromStream(cu.NoStream) != 0 {
		t.Error("cu.NoStream is not handle 0")
	}
}

// TestContext checks that gorgonia, through each helper, works in the
// primary context that distopt uses.
func TestContext(t *testing.T) {
	b := open(t)
	want := cuinterop.PrimaryContext(b)
	n, err := cu.NumDevices()
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if d, err := cu.GetDevice(i); err != nil || d != cu.Device(i) {
			t.Errorf("cu.GetDevice(%d) = %d, %v: the ordinal is not the CUdevice", i, d, err)
		}
	}
	var got cu.CUContext
	if err := cuinterop.Do(b, func() (err error) { got, err = cu.CurrentContext(); return err }); err != nil || got != want {
		t.Errorf("inside Do the current context is %v (%v), want distopt's %v", got, err, want)
	}
	c, err := cuinterop.OpenContext(cu.Device(b.Ordinal()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.CUContext() != want || c.Device() != cu.Device(b.Ordinal()) {
		t.Errorf("OpenContext: context %v on %d, want %v on %d", c.CUContext(), c.Device(), want, b.Ordinal())
	}
	if err := c.Do(func() (err error) { got, err = cu.CurrentContext(); return err }); err != nil || got != want {
		t.Errorf("inside Context.Do the current context is %v (%v), want %v", got, err, want)
	}
	if _, err := cuinterop.OpenContext(cu.Device(n)); err == nil {
		t.Errorf("OpenContext of device %d of %d succeeded", n, n)
	}
}

// TestMemory allocates with gorgonia on a thread of its own and moves the
// bytes through distopt's backend, both ways.
func TestMemory(t *testing.T) {
	b := open(t)
	c, err := cuinterop.OpenContext(cu.Device(b.Ordinal()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const n = 1<<20 + 3
	r := rand.New(rand.NewPCG(3, 4))
	in, back := make([]byte, n), make([]byte, n)
	for i := range in {
		in[i] = byte(r.Uint32())
	}
	var p cu.DevicePtr
	if err := c.Do(func() (err error) {
		if p, err = cu.MemAlloc(n); err != nil {
			return err
		}
		if err := cu.MemcpyHtoD(p, unsafe.Pointer(&in[0]), n); err != nil {
			return err
		}
		// From pageable memory the copy may return before its DMA has
		// landed; distopt's stream does not wait for the legacy stream.
		return cu.Synchronize()
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Do(func() error { return cu.MemFree(p) })
	buf := cuinterop.FromDevicePtr(p, n, c.Device())
	if err := b.Read(back, buf, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back, in) {
		t.Fatal("distopt read other bytes than gorgonia wrote")
	}
	for i := range in {
		in[i] ^= 0xa5
	}
	if err := b.Write(buf.Slice(1, n), 0, in[1:]); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(func() error { return cu.MemcpyDtoH(unsafe.Pointer(&back[0]), p, n) }); err != nil {
		t.Fatal(err)
	}
	if back[0] != in[0]^0xa5 || !bytes.Equal(back[1:], in[1:]) {
		t.Fatal("gorgonia read other bytes than distopt wrote")
	}
}

func numel(shape []int) int {
	n := 1
	for _, s := range shape {
		n *= s
	}
	return n
}

// encode returns g as the bytes of a gradient of type dt.
func encode(g []float32, dt buffer.DType) []byte {
	out := make([]byte, len(g)*dt.Size())
	for i, x := range g {
		if dt == buffer.Float32 {
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(x))
		} else {
			binary.LittleEndian.PutUint16(out[2*i:], fp8.BF16FromFloat32(x))
		}
	}
	return out
}

// TestStep trains on the GPU with every gradient written by gorgonia (a
// device-to-device copy on a gorgonia stream, ordered with BackendWait and
// WaitBackend) and a communicator whose copies are gorgonia's, beside the
// CPU backend given the same gradients through SetGrad. The parameter
// views read through cu.DevicePtr must hold the CPU backend's bytes, scales
// and weights, bit for bit.
func TestStep(t *testing.T) {
	b := open(t)
	bstream := cuinterop.ToStream(b.Stream().Handle())
	copier := func(dst, src buffer.Buffer) error {
		dp, err := cuinterop.DevicePtr(dst)
		if err != nil {
			return err
		}
		sp, err := cuinterop.DevicePtr(src)
		if err != nil {
			return err
		}
		return cuinterop.Do(b, func() error {
			return cu.MemcpyDtoDAsync(dp, sp, int64(min(dst.Len(), src.Len())), bstream)
		})
	}
	params := []optimizer.Param{
		{Name: "w", Shape: []int{33, 131}},
		{Name: "b", Shape: []int{131}, HighPrecision: true, NoDecay: true},
		{Name: "one", Shape: []int{1}},
	}
	for _, c := range []struct {
		name string
		cfg  optimizer.Config
	}{
		{"e4m3 current, bf16 grads", optimizer.Config{}},
		{"e5m2 mxfp8, fp32 grads", optimizer.Config{Recipe: fp8.Recipe{Format: fp8.E5M2, Scaling: fp8.MXFP8}, GradType: buffer.Float32}},
		{"e4m3 1x128 blocks", optimizer.Config{Recipe: fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.Block1x128}}},
		{"e4m3 delayed", optimizer.Config{Recipe: fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorDelayed, HistoryLen: 4}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			r := rand.New(rand.NewPCG(1, 2))
			init := map[string][]float32{}
			for _, p := range params {
				v := make([]float32, numel(p.Shape))
				for i := range v {
					v[i] = float32(r.NormFloat64() * 0.05)
				}
				init[p.Name] = v
			}
			o, err := optimizer.New(ctx, single.New(buffer.Device, copier), b, params, optimizer.FromMap(init), c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer o.Close()
			ref, err := optimizer.New(ctx, single.New(buffer.Host, nil), cpu.New(1), params, optimizer.FromMap(init), c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer ref.Close()
			g, err := newGorgoniaGrads(b, o, params)
			if err != nil {
				t.Fatal(err)
			}
			defer g.close()
			for step := range 3 {
				grads := map[string][]float32{}
				for _, p := range params {
					v := make([]float32, numel(p.Shape))
					for i := range v {
						v[i] = float32(r.IntN(257)-128) * 0x1p-10
					}
					grads[p.Name] = v
					if err := ref.SetGrad(p.Name, v); err != nil {
						t.Fatal(err)
					}
				}
				if err := g.write(grads); err != nil {
					t.Fatal(err)
				}
				if _, err := o.Step(ctx); err != nil {
					t.Fatal(err)
				}
				if _, err := ref.Step(ctx); err != nil {
					t.Fatal(err)
				}
				for _, p := range params {
					compareParam(t, b, o, ref, p, step)
				}
			}
		})
	}
}

// gorgoniaGrads is a gorgonia program's side of TestStep: its own stream
// and a staging buffer per parameter in gorgonia memory.
type gorgoniaGrads struct {
	b     *gpu.Backend
	o     *optimizer.Optimizer
	s     cu.Stream
	stage map[string]cu.DevicePtr
}

func newGorgoniaGrads(b *gpu.Backend, o *optimizer.Optimizer, params []optimizer.Param) (*gorgoniaGrads, error) {
	g := &gorgoniaGrads{b: b, o: o, stage: map[string]cu.DevicePtr{}}
	err := cuinterop.Do(b, func() (err error) {
		if g.s, err = cu.MakeStream(cu.NonBlocking); err != nil {
			return err
		}
		for _, p := range params {
			v, err := o.Grad(p.Name)
			if err != nil {
				return err
			}
			if g.stage[p.Name], err = cu.MemAlloc(int64(v.Data.Len())); err != nil {
				return err
			}
		}
		return nil
	})
	return g, err
}

// write zeroes the gradients on distopt's stream, then (ordered after it
// with WaitBackend) copies each gradient from its staging buffer into the
// gradient view on gorgonia's stream, and orders the backend after that
// with BackendWait: no host synchronization between Zero and Step.
func (g *gorgoniaGrads) write(grads map[string][]float32) error {
	for name, v := range grads {
		view, err := g.o.Grad(name)
		if err != nil {
			return err
		}
		raw := encode(v, view.DType)
		// Queued on gorgonia's stream (pageable memory is staged before the
		// call returns), so the copies below come after it.
		if err := cuinterop.Do(g.b, func() error {
			return cu.MemcpyHtoDAsync(g.stage[name], unsafe.Pointer(&raw[0]), int64(len(raw)), g.s)
		}); err != nil {
			return err
		}
	}
	if err := g.o.ZeroGrad(); err != nil {
		return err
	}
	if err := cuinterop.WaitBackend(g.s, g.b); err != nil {
		return err
	}
	for name := range grads {
		view, err := g.o.Grad(name)
		if err != nil {
			return err
		}
		dst, n, err := cuinterop.GradPtr(view)
		if err != nil {
			return err
		}
		if err := cuinterop.Do(g.b, func() error { return cu.MemcpyDtoDAsync(dst, g.stage[name], n, g.s) }); err != nil {
			return err
		}
	}
	return cuinterop.BackendWait(g.b, g.s)
}

func (g *gorgoniaGrads) close() {
	cuinterop.Do(g.b, func() error {
		g.s.Synchronize()
		for _, p := range g.stage {
			cu.MemFree(p)
		}
		return g.s.Destroy()
	})
}

// download copies the view's n bytes at p into host memory with gorgonia.
func download(b *gpu.Backend, p cu.DevicePtr, n int64) ([]byte, error) {
	out := make([]byte, n)
	if n == 0 {
		return out, nil
	}
	return out, cuinterop.Do(b, func() error { return cu.MemcpyDtoH(unsafe.Pointer(&out[0]), p, n) })
}

func compareParam(t *testing.T, b *gpu.Backend, o, ref *optimizer.Optimizer, p optimizer.Param, step int) {
	t.Helper()
	view, err := o.Param(p.Name)
	if err != nil {
		t.Fatal(err)
	}
	dp, n, err := cuinterop.ParamPtr(view)
	if err != nil {
		t.Fatal(err)
	}
	data, err := download(b, dp, n)
	if err != nil {
		t.Fatal(err)
	}
	wantW, err := ref.Weights(p.Name)
	if err != nil {
		t.Fatal(err)
	}
	if p.HighPrecision {
		if !bytes.Equal(data, encode(wantW, view.DType)) {
			t.Errorf("step %d, %s: high-precision bytes differ from the CPU backend's", step, p.Name)
		}
		if _, _, err := cuinterop.ScaleInvPtr(view); !errors.Is(err, cuinterop.ErrNoScale) {
			t.Errorf("%s: ScaleInvPtr: %v, want ErrNoScale", p.Name, err)
		}
		return
	}
	sp, sn, err := cuinterop.ScaleInvPtr(view)
	if err != nil {
		t.Fatal(err)
	}
	scales, err := download(b, sp, sn)
	if err != nil {
		t.Fatal(err)
	}
	want, err := ref.Tensor(p.Name)
	if err != nil {
		t.Fatal(err)
	}
	mine, err := o.Tensor(p.Name)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, want.Data) || !bytes.Equal(data, mine.Data) {
		t.Errorf("step %d, %s: FP8 bytes read through cu.DevicePtr differ from the CPU backend's or Tensor's", step, p.Name)
	}
	wantScales := want.ScaleE8M0
	if view.Recipe.Scaling != fp8.MXFP8 {
		wantScales = encode(want.ScaleInv, buffer.Float32)
	}
	if !bytes.Equal(scales, wantScales) {
		t.Errorf("step %d, %s: scale_inv read through cu.DevicePtr differs from the CPU backend's", step, p.Name)
	}
	// Dequantize what gorgonia read, as a model would, against Weights.
	got := &fp8.Tensor{Data: data, Shape: view.Shape, Format: view.Format, Recipe: view.Recipe}
	if view.Recipe.Scaling == fp8.MXFP8 {
		got.ScaleE8M0 = scales
		for _, e := range scales {
			got.ScaleInv = append(got.ScaleInv, fp8.E8M0Value(e))
		}
	} else {
		for i := 0; i < len(scales); i += 4 {
			got.ScaleInv = append(got.ScaleInv, math.Float32frombits(binary.LittleEndian.Uint32(scales[i:])))
		}
	}
	w := make([]float32, len(data))
	if err := got.Dequantize(w); err != nil {
		t.Fatal(err)
	}
	for i := range w {
		if math.Float32bits(w[i]) != math.Float32bits(wantW[i]) {
			t.Fatalf("step %d, %s[%d]: dequantized %g, Weights %g", step, p.Name, i, w[i], wantW[i])
		}
	}
}
