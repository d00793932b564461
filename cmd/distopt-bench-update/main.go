// Command distopt-bench-update times the fused optimizer update and FP8
// cast of the CUDA backend (optimizer/gpu) on one shard, for each recipe,
// and compares it with the device-to-device copy bandwidth measured in the
// same run.
//
// For each recipe it reports the time per step (CUDA events around
// -iters iterations, after -warmup), the minimum bytes moved (every
// operand read once and written once: AdamW with float32 master and
// moments and bfloat16 gradients is 8+8+8+2 bytes per element, plus 1 for
// the FP8 byte and the block scales), the bytes actually moved (current
// scaling and 128x128 tiles read the master a second time for the cast:
// +4), the bandwidth of each and its ratio to the copy bandwidth.
//
// Two more tables time the one-pass Block1x128 update with each storage
// of the optimizer state: AdamW's moments (float32, bfloat16, FP8 with
// block scales, mixed) and SGD's momentum: bytes moved per element,
// bandwidth, its ratio to the copy, and the speed-up over float32 state
// (moments.go).
//
// Usage:
//
//	distopt-bench-update [-n 268435456] [-segments 64] [-iters 20] [-warmup 3] [-tables all]
//
// -tables moments prints the copy and those two tables alone.
package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/distopt/distopt/buffer"
	pcuda "github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/cudalink"
	"github.com/distopt/distopt/optimizer/backend"
	"github.com/distopt/distopt/optimizer/gpu"
)

func main() {
	n := flag.Int("n", 1<<28, "elements in the shard")
	nseg := flag.Int("segments", 64, "segments (tensors) in the shard")
	iters := flag.Int("iters", 20, "timed iterations")
	warmup := flag.Int("warmup", 3, "untimed iterations first")
	tables := flag.String("tables", "all", "tables to print: all, or moments (the optimizer-state storage tables alone)")
	flag.Parse()
	if *tables != "all" && *tables != "moments" {
		fmt.Fprintf(os.Stderr, "distopt-bench-update: -tables %q (all or moments)\n", *tables)
		os.Exit(2)
	}
	if err := run(*n, *nseg, *iters, *warmup, *tables == "moments"); err != nil {
		fmt.Fprintln(os.Stderr, "distopt-bench-update:", err)
		os.Exit(1)
	}
}

// bench is the state of one run.
type bench struct {
	b      *gpu.Backend
	n      int
	iters  int
	warmup int
	start  *cuda.Event
	end    *cuda.Event
}

// timeIt returns the mean time of fn over the timed iterations.
func (x *bench) timeIt(fn func() error) (time.Duration, error) {
	for range x.warmup {
		if err := fn(); err != nil {
			return 0, err
		}
	}
	s := x.b.Stream()
	if err := x.start.Record(cudalink.Stream(s)); err != nil {
		return 0, err
	}
	for range x.iters {
		if err := fn(); err != nil {
			return 0, err
		}
	}
	if err := x.end.Record(cudalink.Stream(s)); err != nil {
		return 0, err
	}
	if err := x.end.Synchronize(); err != nil {
		return 0, err
	}
	d, err := cuda.Elapsed(x.start, x.end)
	return d / time.Duration(x.iters), err
}

// run measures every recipe and prints the table. It is long on purpose:
// one straight sequence of allocations and timed launches whose order is the
// order of the table's rows; split up, the reader would chase the rows.
func run(n, nseg, iters, warmup int, momentsOnly bool) error {
	b, err := gpu.New(0)
	if err != nil {
		return err
	}
	defer b.Close()
	x := &bench{b: b, n: n, iters: iters, warmup: warmup}
	if x.start, err = cudalink.Device(b.Device()).NewEvent(true); err != nil {
		return err
	}
	defer x.start.Destroy()
	if x.end, err = cudalink.Device(b.Device()).NewEvent(true); err != nil {
		return err
	}
	defer x.end.Destroy()

	alloc := func(size int) buffer.Buffer {
		if err != nil {
			return nil
		}
		var buf buffer.Buffer
		buf, err = b.Alloc(size)
		return buf
	}
	master, m, v := alloc(4*n), alloc(4*n), alloc(4*n)
	grad, out := alloc(2*n), alloc(n)
	blocks := alloc(4 * (n/32 + 1))
	if err != nil {
		return err
	}
	if err := fillPattern(b, master, grad, n); err != nil {
		return err
	}
	// The copy bandwidth: master to m (1 byte read + 1 written per byte).
	copyT, err := x.timeIt(func() error {
		return b.Stream().CopyDtoD(pcuda.DevicePtr(cuda.DevicePtr(m.(buffer.DeviceBuffer).Ptr)), pcuda.DevicePtr(cuda.DevicePtr(master.(buffer.DeviceBuffer).Ptr)), 4*n)
	})
	if err != nil {
		return err
	}
	if err := b.Zero(m, 0, 4*n); err != nil {
		return err
	}
	copyBW := float64(8*n) / copyT.Seconds() / 1e9
	fmt.Printf("# distopt-bench-update: %s, n = %d, %d segments, %d iterations\n\n", b.Name(), n, nseg, iters)
	fmt.Printf("device-to-device copy of %d bytes: %.3f ms, %.0f GB/s (read + write)\n\n", 4*n, ms(copyT), copyBW)
	if momentsOnly {
		return x.moments(copyBW, master, grad, out, blocks)
	}
	fmt.Println("| recipe | time | min bytes/elem | GB/s on min | of copy | bytes moved/elem | GB/s moved | of copy |")
	fmt.Println("|---|---|---|---|---|---|---|---|")

	recipes := []recipe{
		{"TensorCurrent E4M3 (update+amax, then cast)", fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}, backend.ModeTensorCurrent, 0},
		{"TensorDelayed E4M3 (one pass)", fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorDelayed}, backend.ModeTensorDelayed, 0},
		{"Block1x128 E4M3 (one pass)", fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.Block1x128}, backend.ModeBlock, 4.0 / 128},
		{"MXFP8 E4M3 (one pass)", fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.MXFP8}, backend.ModeBlock, 1.0 / 32},
		{"Block128x128 E4M3 (update+tile amax, then cast)", fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.Block128x128}, backend.ModeTile, 0},
	}
	for _, rc := range recipes {
		if err := x.recipe(rc, nseg, copyBW, updateBufs{master, m, v, grad, out, blocks}); err != nil {
			return err
		}
	}
	return x.moments(copyBW, master, grad, out, blocks)
}

// recipe is one row of the update table: a recipe's name, its mode and
// its block-scale bytes per element.
type recipe struct {
	name   string
	r      fp8.Recipe
	mode   backend.Mode
	scales float64 // block-scale bytes per element
}

// updateBufs are the buffers every recipe's update runs over.
type updateBufs struct {
	master, m, v, grad, out, blocks buffer.Buffer
}

// recipe times the update (and the cast, for two-pass recipes) of rc over
// u and prints its row of the table.
func (x *bench) recipe(rc recipe, nseg int, copyBW float64, u updateBufs) error {
	b, n := x.b, x.n
	segs, slots := layout(n, nseg, rc.mode)
	amax, err := b.Alloc(4 * slots)
	if err != nil {
		return err
	}
	defer b.Free(amax)
	scale, err := b.Alloc(4 * slots)
	if err != nil {
		return err
	}
	defer b.Free(scale)
	ones := make([]float32, slots)
	for i := range ones {
		ones[i] = 1
	}
	if err := b.Write(scale, 0, f32bytes(ones)); err != nil {
		return err
	}
	a := &backend.UpdateArgs{Rule: backend.RuleAdamW, N: n, Master: u.master, M: u.m, V: u.v, MomentType: buffer.Float32,
		Grad: u.grad, GradType: buffer.BFloat16, Segments: segs, Recipe: rc.r, FP8: u.out, BlockScales: u.blocks,
		Amax: amax, Scale: scale,
		Hyper: backend.Hyper{GradScale: 1, Beta1: 0.9, Beta2: 0.999, OneMinusBeta1: float32(1 - 0.9),
			OneMinusBeta2: float32(1 - 0.999), Eps: 1e-8, SqrtVCorrection: float32(1 / math.Sqrt(1-0.999))}}
	c := &backend.CastArgs{N: n, Master: u.master, Segments: segs, Format: rc.r.Format, FP8: u.out, Scale: scale}
	twoPass := rc.mode == backend.ModeTensorCurrent || rc.mode == backend.ModeTile
	t, err := x.timeIt(func() error {
		if err := b.Zero(amax, 0, 4*slots); err != nil {
			return err
		}
		if err := b.Update(a); err != nil {
			return err
		}
		if twoPass {
			return b.Cast(c)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s: %w", rc.name, err)
	}
	minB := 27 + rc.scales
	moved := minB
	if twoPass {
		moved += 4
	}
	bwMin := minB * float64(n) / t.Seconds() / 1e9
	bwMoved := moved * float64(n) / t.Seconds() / 1e9
	fmt.Printf("| %s | %.3f ms | %.2f | %.0f | %.0f%% | %.2f | %.0f | %.0f%% |\n", rc.name, ms(t), minB, bwMin, 100*bwMin/copyBW, moved, bwMoved, 100*bwMoved/copyBW)
	if twoPass {
		tu, err := x.timeIt(func() error { return b.Update(a) })
		if err != nil {
			return err
		}
		tc, err := x.timeIt(func() error { return b.Cast(c) })
		if err != nil {
			return err
		}
		fmt.Printf("|   of which update+amax / cast | %.3f / %.3f ms | 27 / 5 | %.0f / %.0f | | | | |\n", ms(tu), ms(tc),
			27*float64(n)/tu.Seconds()/1e9, 5*float64(n)/tc.Seconds()/1e9)
	}
	return nil
}

// layout cuts n elements into nseg segments of mode; tile segments are
// matrices of 4096 columns. It returns the segments and the slots they use.
func layout(n, nseg int, mode backend.Mode) ([]backend.Segment, int) {
	segs := make([]backend.Segment, nseg)
	slots := 0
	for i := range segs {
		lo, hi := n*i/nseg/128*128, n*(i+1)/nseg/128*128
		if i == nseg-1 {
			hi = n
		}
		s := backend.Segment{Off: lo, Len: hi - lo, Mode: mode, Factors: backend.Factors{StepSize: 1e-3, Shrink: 1 - 1e-4}, Slot: slots}
		switch mode {
		case backend.ModeTensorCurrent, backend.ModeTensorDelayed:
			slots++
		case backend.ModeTile:
			s.Cols = 4096
			slots += fp8.TileIndex(s.Len-1, s.Cols, 128) + (s.Cols+127)/128
		}
		segs[i] = s
	}
	return segs, max(slots, 1)
}

// fillPattern writes small normal-like values to the master and bfloat16
// gradients, a megabyte-sized pattern repeated.
func fillPattern(b *gpu.Backend, master, grad buffer.Buffer, n int) error {
	const k = 1 << 20
	p := make([]float32, k)
	g := make([]byte, 2*k)
	for i := range p {
		p[i] = float32(math.Sin(float64(i))) * 0.05
		h := fp8.BF16FromFloat32(float32(math.Cos(float64(i))) * 0.01)
		g[2*i], g[2*i+1] = byte(h), byte(h>>8)
	}
	pb := f32bytes(p)
	for off := 0; off < n; off += k {
		c := min(k, n-off)
		if err := b.Write(master, 4*off, pb[:4*c]); err != nil {
			return err
		}
		if err := b.Write(grad, 2*off, g[:2*c]); err != nil {
			return err
		}
	}
	return nil
}

func f32bytes(x []float32) []byte {
	b := make([]byte, 4*len(x))
	for i, v := range x {
		u := math.Float32bits(v)
		b[4*i], b[4*i+1], b[4*i+2], b[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
	}
	return b
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }
