package cudnn

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/distopt/distopt/bf16"
	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/cuda/cudatest"
	"github.com/distopt/distopt/examples/gpt/kernels"
)

// gpuCase holds one shape's buffers on the GPU in the model's layout and
// runs cuDNN's attention and the fused kernels of examples/gpt/kernels on
// them.
type gpuCase struct {
	s      Shape
	d      *cuda.Device
	st     *cuda.Stream
	k      *kernels.Set
	a      *Attention
	scale  float32
	data   *rowData
	qkv16  cuda.DevicePtr // bfloat16 [batch·seq, 3hd]
	do16   cuda.DevicePtr // bfloat16 [batch·seq, hd]
	dy32   cuda.DevicePtr // the same gradient in float32, as the fused kernels read it
	o16    cuda.DevicePtr // cuDNN's o, bfloat16 [batch·seq, hd]
	stats  cuda.DevicePtr
	dqkv16 cuda.DevicePtr // cuDNN's gradients, bfloat16 [batch·seq, 3hd]
	// The fused kernels' packed heads, outputs and scratch.
	q, kk, v, fo16, flse, fo32, fdqkv, fdo16, fdsum cuda.DevicePtr
}

// openGPU opens GPU 0, cuDNN and the kernels, or skips (see cudatest).
func openGPU(tb testing.TB) (*cuda.Device, *Library, *kernels.Set) {
	tb.Helper()
	d := cudatest.Require(tb)
	lib, err := Default()
	cudatest.Unavailable(tb, err, ErrNoLibrary, ErrTooOld)
	k, err := kernels.Load(d)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { k.Close() })
	tb.Logf("%v", lib)
	return d, lib, k
}

// newGPUCase uploads random bfloat16 inputs of shape s and builds cuDNN's
// plans for the model's layout.
func newGPUCase(tb testing.TB, d *cuda.Device, lib *Library, k *kernels.Set, s Shape, seed uint64) *gpuCase {
	tb.Helper()
	c := &gpuCase{s: s, d: d, k: k, st: cudatest.Stream(tb, d), scale: graphScale(s), data: randomRows(s, seed)}
	n := s.Batch * s.Seq * s.Heads * s.D
	a, err := New(lib, d, Config{Shape: s, Layout: RowLayout(s), Scale: c.scale})
	if err != nil {
		tb.Fatalf("cuDNN refused %v: %v", s, err)
	}
	tb.Cleanup(func() { a.Close() })
	c.a = a
	al := func(bytes int) cuda.DevicePtr { return cudatest.Alloc(tb, d, bytes) }
	c.qkv16, c.do16, c.dy32, c.o16, c.dqkv16 = al(6*n), al(2*n), al(4*n), al(2*n), al(6*n)
	c.stats = al(StatsBytes(s))
	c.q, c.kk, c.v, c.fo16, c.fo32, c.fdo16 = al(2*n), al(2*n), al(2*n), al(2*n), al(4*n), al(2*n)
	c.flse, c.fdsum, c.fdqkv = al(StatsBytes(s)), al(StatsBytes(s)), al(12*n)
	up := func(dst cuda.DevicePtr, x []float64, wide bool) {
		var err error
		if wide {
			f := make([]float32, len(x))
			for i, v := range x {
				f[i] = float32(v)
			}
			err = c.st.Upload(dst, cuda.Bytes(f))
		} else {
			h := make([]uint16, len(x))
			for i, v := range x {
				h[i] = bf16.FromFloat32(float32(v))
			}
			err = c.st.Upload(dst, cuda.Bytes(h))
		}
		if err != nil {
			tb.Fatal(err)
		}
	}
	up(c.qkv16, c.data.qkv, false)
	up(c.do16, c.data.do, false)
	up(c.dy32, c.data.do, true)
	return c
}

// cudnnFwd and cudnnBwd queue cuDNN's passes.
func (c *gpuCase) cudnnFwd() error {
	w := 2 * c.s.Heads * c.s.D
	return c.a.Forward(c.st, ForwardArgs{Q: c.qkv16, K: c.qkv16.Add(w), V: c.qkv16.Add(2 * w), O: c.o16, Stats: c.stats})
}

func (c *gpuCase) cudnnBwd() error {
	w := 2 * c.s.Heads * c.s.D
	return c.a.Backward(c.st, BackwardArgs{Q: c.qkv16, K: c.qkv16.Add(w), V: c.qkv16.Add(2 * w), O: c.o16, DO: c.do16,
		Stats: c.stats, DQ: c.dqkv16, DK: c.dqkv16.Add(w), DV: c.dqkv16.Add(2 * w)})
}

// flashShape is the kernels' shape of c.
func (c *gpuCase) flashShape() kernels.FlashShape {
	return kernels.FlashShape{Batch: c.s.Batch, Heads: c.s.Heads, Seq: c.s.Seq, D: c.s.D}
}

// flashSplit copies the heads of qkv into the kernels' packed buffers (the
// model's flash path does this too; the benchmark times it apart).
func (c *gpuCase) flashSplit() error {
	hd := c.s.Heads * c.s.D
	for i, dst := range []cuda.DevicePtr{c.q, c.kk, c.v} {
		l := kernels.HeadLayout{Batch: c.s.Batch, Seq: c.s.Seq, Heads: c.s.Heads, D: c.s.D, LD: 3 * hd, Off: i * hd}
		if err := c.k.AttentionSplitHeadsBF16FromBF16(c.st, dst, c.qkv16, l); err != nil {
			return err
		}
	}
	return nil
}

func (c *gpuCase) flashFwd() error {
	hd := c.s.Heads * c.s.D
	return c.k.FlashForward(c.st, kernels.FlashRows{Ptr: c.fo32, LD: hd}, c.fo16, c.flse, c.q, c.kk, c.v, c.flashShape(), c.scale)
}

func (c *gpuCase) flashBwd() error {
	hd := c.s.Heads * c.s.D
	g := kernels.FlashGrads{DQ: kernels.FlashRows{Ptr: c.fdqkv, LD: 3 * hd}, DK: kernels.FlashRows{Ptr: c.fdqkv.Add(4 * hd), LD: 3 * hd},
		DV: kernels.FlashRows{Ptr: c.fdqkv.Add(8 * hd), LD: 3 * hd}}
	return c.k.FlashBackward(c.st, g, kernels.FlashScratch{DO16: c.fdo16, DSum: c.fdsum}, kernels.FlashRows{Ptr: c.dy32, LD: hd},
		c.q, c.kk, c.v, c.fo16, c.flse, c.flashShape(), c.scale)
}

// download16 and download32 read n values back as float64.
func (c *gpuCase) download16(tb testing.TB, p cuda.DevicePtr, n int) []float64 {
	h := make([]uint16, n)
	if err := c.st.Download(cuda.Bytes(h), p); err != nil {
		tb.Fatal(err)
	}
	out := make([]float64, n)
	for i, x := range h {
		out[i] = float64(bf16.ToFloat32(x))
	}
	return out
}

func (c *gpuCase) download32(tb testing.TB, p cuda.DevicePtr, n int) []float64 {
	h := make([]float32, n)
	if err := c.st.Download(cuda.Bytes(h), p); err != nil {
		tb.Fatal(err)
	}
	out := make([]float64, n)
	for i, x := range h {
		out[i] = float64(x)
	}
	return out
}

// gpuTol is each output's tolerance, as a share of its largest value: the
// fused kernels' (examples/gpt/kernels flashTol, from the bfloat16
// roundings of p and ds) plus cuDNN's own bfloat16 store of o, dq, dk, dv
// (2^-9); the statistics are float32 throughout.
var gpuTol = map[string]float64{"o": 1.2e-2, "stats": 1e-5, "dq": 2.2e-2, "dk": 2.2e-2, "dv": 1.2e-2}

// gpuShapes are the shapes of TestAttentionGPU: a small one, and the
// GPT's 124M shape (batch 16 as the example trains it).
var gpuShapes = []Shape{{Batch: 2, Heads: 4, Seq: 256, D: 64}, {Batch: 2, Heads: 2, Seq: 384, D: 128},
	{Batch: 16, Heads: 12, Seq: 1024, D: 64}}

// TestAttentionGPU runs cuDNN's forward and backward passes in the model's
// layout and compares them with the float64 reference on a few heads
// (every head of the small shapes) and with the fused kernels on all;
// then the backward pass again in its repeatable form (Config.Repeatable).
func TestAttentionGPU(t *testing.T) {
	d, lib, k := openGPU(t)
	for i, s := range gpuShapes {
		t.Run(s.String(), func(t *testing.T) {
			c := newGPUCase(t, d, lib, k, s, uint64(100+i))
			for _, step := range []func() error{c.cudnnFwd, c.cudnnBwd, c.flashSplit, c.flashFwd, c.flashBwd, c.st.Synchronize} {
				if err := step(); err != nil {
					t.Fatal(err)
				}
			}
			c.compare(t)
			c.a = c.attention(t, lib, Config{Repeatable: true})
			if err := c.st.Memset8(c.dqkv16, 0xff, 6*s.Batch*s.Seq*s.Heads*s.D); err != nil { // NaN: every element must be written
				t.Fatal(err)
			}
			for _, step := range []func() error{c.cudnnBwd, c.st.Synchronize} {
				if err := step(); err != nil {
					t.Fatal(err)
				}
			}
			c.compare(t)
		})
	}
}

// attention builds an Attention of c's shape, layout and scale with the
// options of opts (Deterministic, Repeatable), closed at the end of the
// test.
func (c *gpuCase) attention(tb testing.TB, lib *Library, opts Config) *Attention {
	tb.Helper()
	opts.Shape, opts.Layout, opts.Scale = c.s, RowLayout(c.s), c.scale
	a, err := New(lib, c.d, opts)
	if err != nil {
		tb.Fatalf("cuDNN refused %v (deterministic %v, repeatable %v): %v", c.s, opts.Deterministic, opts.Repeatable, err)
	}
	tb.Cleanup(func() { a.Close() })
	return a
}

// compare checks c's outputs against the reference and the fused kernels.
func (c *gpuCase) compare(t *testing.T) {
	s, r := c.s, c.data
	n, hd := s.Batch*s.Seq*s.Heads*s.D, s.Heads*s.D
	dqkv := c.download16(t, c.dqkv16, 3*n)
	got := ref{o: r.pack(c.download16(t, c.o16, n), hd, 0), lse: c.download32(t, c.stats, s.Batch*s.Heads*s.Seq),
		dq: r.pack(dqkv, 3*hd, 0), dk: r.pack(dqkv, 3*hd, hd), dv: r.pack(dqkv, 3*hd, 2*hd)}
	fdqkv := c.download32(t, c.fdqkv, 3*n)
	flash := ref{o: r.pack(c.download32(t, c.fo32, n), hd, 0), lse: c.download32(t, c.flse, s.Batch*s.Heads*s.Seq),
		dq: r.pack(fdqkv, 3*hd, 0), dk: r.pack(fdqkv, 3*hd, hd), dv: r.pack(fdqkv, 3*hd, 2*hd)}
	heads := s.Batch * s.Heads
	sample := []int{0, heads - 1}
	if heads <= 8 {
		sample = nil
		for i := range heads {
			sample = append(sample, i)
		}
	}
	one := Shape{Batch: 1, Heads: 1, Seq: s.Seq, D: s.D}
	for _, bh := range sample {
		m, rows := s.Seq*s.D, s.Seq
		cut := func(x []float64, per int) []float64 { return x[bh*per : (bh+1)*per] }
		want := refAttention(one, cut(r.q, m), cut(r.k, m), cut(r.v, m), cut(r.doPack, m), float64(c.scale))
		check(t, "reference", bh, want, ref{o: cut(got.o, m), lse: cut(got.lse, rows), dq: cut(got.dq, m), dk: cut(got.dk, m), dv: cut(got.dv, m)}, 1)
	}
	check(t, "fused kernels", -1, flash, got, 2)
}

// check compares got with want, output by output, at slack times gpuTol.
func check(t *testing.T, what string, head int, want, got ref, slack float64) {
	t.Helper()
	for _, x := range []struct {
		name      string
		got, want []float64
	}{{"o", got.o, want.o}, {"stats", got.lse, want.lse}, {"dq", got.dq, want.dq}, {"dk", got.dk, want.dk}, {"dv", got.dv, want.dv}} {
		if e := maxErr(x.got, x.want); !(e <= slack*gpuTol[x.name]) || math.IsNaN(e) {
			t.Errorf("%s (head %d): %s differs by %.3g of its largest value, tolerance %.3g", what, head, x.name, e, slack*gpuTol[x.name])
		}
	}
}

// TestRepeatableGPU runs cuDNN's forward and backward passes three times
// on the same inputs, at the GPT's 124M and 1.3B shapes, with
// Config.Deterministic as gpumodel asks for it, in both forms of the
// backward. The forward must give the same bits every time. The
// accumulating backward did not, on an H100 and an H200 with cuDNN 9.14
// (2026-12-05: 5 to 53 elements of dqkv differed between runs, though no
// engine left carried the nondeterministic note): for it the test logs
// how many elements differ and requires each difference to be a rounding
// of the float32 sums, at most one bfloat16 ulp of dqkv's largest value
// (2^-7 of it). The repeatable form (Config.Repeatable, what gpumodel
// builds) must give the same bits every time.
func TestRepeatableGPU(t *testing.T) {
	d, lib, k := openGPU(t)
	for i, s := range []Shape{{Batch: 16, Heads: 12, Seq: 1024, D: 64}, {Batch: 4, Heads: 16, Seq: 2048, D: 128}} {
		for _, rep := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/repeatable=%v", s, rep), func(t *testing.T) {
				c := newGPUCase(t, d, lib, k, s, uint64(200+i))
				a, err := New(lib, d, Config{Shape: s, Layout: RowLayout(s), Scale: c.scale, Deterministic: true, Repeatable: rep})
				if errors.Is(err, ErrNotSupported) && rep {
					t.Skipf("cuDNN refused the repeatable form (the model then takes the accumulating one and says so): %v", err)
				}
				if errors.Is(err, ErrNotSupported) {
					t.Skipf("no deterministic engine (-attention auto then takes flash): %v", err)
				}
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { a.Close() })
				c.a = a
				c.repeatRuns(t, lib, rep)
			})
		}
	}
}

// repeatRuns runs c's passes three times and compares each run's o and
// dqkv with the first's: o exactly, dqkv exactly if exact, else within a
// bfloat16 ulp of its largest value.
func (c *gpuCase) repeatRuns(t *testing.T, lib *Library, exact bool) {
	s := c.s
	n := s.Batch * s.Seq * s.Heads * s.D
	fwd, bwd := c.a.Workspace()
	t.Logf("%v: plan workspaces %d and %d bytes", lib, fwd, bwd)
	var o0, dqkv0 []float64
	for run := range 3 {
		for _, step := range []func() error{c.cudnnFwd, c.cudnnBwd, c.st.Synchronize} {
			if err := step(); err != nil {
				t.Fatal(err)
			}
		}
		o, dqkv := c.download16(t, c.o16, n), c.download16(t, c.dqkv16, 3*n)
		if run == 0 {
			o0, dqkv0 = o, dqkv
			continue
		}
		if diff := differing(o, o0); diff > 0 {
			t.Errorf("run %d: %d of %d elements of o differ from the first run's", run+1, diff, n)
		}
		diff, e := differing(dqkv, dqkv0), maxErr(dqkv, dqkv0)
		t.Logf("run %d: %d of %d elements of dqkv differ from the first run's, by at most %.3g of its largest value", run+1, diff, 3*n, e)
		if exact && diff > 0 {
			t.Errorf("run %d: %d elements of dqkv differ from the first run's in the repeatable form", run+1, diff)
		}
		if !(e <= 1.0/128) {
			t.Errorf("run %d: dqkv differs from the first run's by %.3g of its largest value, more than a rounding (2^-7)", run+1, e)
		}
	}
}

// differing counts the elements of a and b that differ.
func differing(a, b []float64) int {
	n := 0
	for i := range a {
		if a[i] != b[i] {
			n++
		}
	}
	return n
}
