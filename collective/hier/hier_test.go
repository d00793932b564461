package hier_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/hier"
	"github.com/distopt/distopt/collective/single"
)

// f32 encodes xs as little-endian float32 bytes.
func f32(xs []float32) buffer.HostBuffer {
	b := make(buffer.HostBuffer, 4*len(xs))
	for i, x := range xs {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// floats decodes little-endian float32 bytes.
func floats(b buffer.HostBuffer) []float32 {
	xs := make([]float32, len(b)/4)
	for i := range xs {
		xs[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return xs
}

// input is rank r's element j: a multiple of 6 (so that every average of
// the test is exact), different on every rank, negative on some.
func input(r, j int) float32 { return float32(6 * ((r*7+j*5)%23 - 11)) }

// forEach runs f on every rank of comms, each in its goroutine, under a
// deadline, and fails the test with every rank's error.
func forEach(t *testing.T, comms []*hier.Comm, f func(ctx context.Context, r int, c *hier.Comm) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Go(func() { errs[r] = f(ctx, r, c) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// The reduce-scatter of a hierarchical world leaves on rank i of every
// group slice i (of g) of the reduction over all d ranks, computed here
// directly in float64. d = 6 in every factorization, in-process and over
// gRPC sub-communicators.
func TestReduceScatterReducesOverAllRanks(t *testing.T) {
	const d, per = 6, 5
	for _, w := range worlds {
		for _, g := range []int{1, 2, 3, 6} {
			t.Run(fmt.Sprintf("%s/g=%d", w.name, g), func(t *testing.T) {
				comms, err := w.make(t, d, g)
				if err != nil {
					t.Fatal(err)
				}
				for _, op := range []collective.ReduceOp{collective.Sum, collective.Avg, collective.Max} {
					reduceScatterCase(t, comms, d, g, per, op)
				}
			})
		}
	}
}

// reduceScatterCase checks one reduction of
// TestReduceScatterReducesOverAllRanks against float64.
func reduceScatterCase(t *testing.T, comms []*hier.Comm, d, g, per int, op collective.ReduceOp) {
	t.Helper()
	n := g * per
	want := make([]float32, n)
	for j := range want {
		acc := math.Inf(-1)
		if op != collective.Max {
			acc = 0
		}
		for r := range d {
			if op == collective.Max {
				acc = math.Max(acc, float64(input(r, j)))
			} else {
				acc += float64(input(r, j))
			}
		}
		if op == collective.Avg {
			acc /= float64(d)
		}
		want[j] = float32(acc)
	}
	forEach(t, comms, func(ctx context.Context, r int, c *hier.Comm) error {
		src := make([]float32, n)
		for j := range src {
			src[j] = input(r, j)
		}
		buf := f32(src)
		i := c.Rank()
		dst := buf.Slice(4*i*per, 4*(i+1)*per) // in place, as the optimizer does
		if err := collective.ReduceScatter(ctx, c, dst, buf, buffer.Float32, op); err != nil {
			return err
		}
		got := floats(dst.(buffer.HostBuffer))
		for j, v := range got {
			if w := want[i*per+j]; v != w {
				return fmt.Errorf("%v: rank %d (group %d, rank %d in it): element %d = %v, want %v", op, r, r/g, i, i*per+j, v, w)
			}
		}
		return nil
	})
}

// All-reduce, all-gather and broadcast act within the group only; ranks
// and sizes are those of Layout.
func TestOtherOpsStayInTheGroup(t *testing.T) {
	for _, w := range worlds {
		t.Run(w.name, func(t *testing.T) {
			const d, g = 6, 3
			comms, err := w.make(t, d, g)
			if err != nil {
				t.Fatal(err)
			}
			otherOps(t, comms, d, g)
		})
	}
}

// otherOps is TestOtherOpsStayInTheGroup on one world.
func otherOps(t *testing.T, comms []*hier.Comm, d, g int) {
	forEach(t, comms, func(ctx context.Context, r int, c *hier.Comm) error {
		if c.GlobalRank() != r || c.Size() != g || c.Rank() != r%g || c.Cross().Rank() != r/g || c.Cross().Size() != d/g {
			return fmt.Errorf("rank %d: global %d, rank %d of %d, cross %d of %d", r, c.GlobalRank(), c.Rank(), c.Size(), c.Cross().Rank(), c.Cross().Size())
		}
		sum := f32([]float32{float32(r)})
		if err := collective.AllReduce(ctx, c, sum, sum, buffer.Float32, collective.Sum); err != nil {
			return err
		}
		first := r / g * g
		if got, want := floats(sum)[0], float32(3*first+3); got != want {
			return fmt.Errorf("rank %d: all-reduce %v, want the group's sum %v", r, got, want)
		}
		all := make(buffer.HostBuffer, 4*g)
		copy(all[4*c.Rank():], f32([]float32{float32(r)}))
		if err := collective.AllGather(ctx, c, all, all.Slice(4*c.Rank(), 4*c.Rank()+4)); err != nil {
			return err
		}
		for i, v := range floats(all) {
			if v != float32(first+i) {
				return fmt.Errorf("rank %d: all-gather %v, want the group's ranks from %d", r, floats(all), first)
			}
		}
		b := f32([]float32{float32(r)})
		if err := collective.Broadcast(ctx, c, b, 1); err != nil {
			return err
		}
		if got := floats(b)[0]; got != float32(first+1) {
			return fmt.Errorf("rank %d: broadcast from group rank 1 gave %v, want %d", r, got, first+1)
		}
		return nil
	})
}

// Ranks that wait for two started reduce-scatters in different orders
// still issue their cross-group phases in start order: no mismatch, no
// hang, and both results right.
func TestWaitOrderDoesNotMatter(t *testing.T) {
	for _, w := range worlds {
		t.Run(w.name, func(t *testing.T) {
			const d, g = 4, 2
			comms, err := w.make(t, d, g)
			if err != nil {
				t.Fatal(err)
			}
			waitOrder(t, comms, d)
		})
	}
}

// waitOrder is TestWaitOrderDoesNotMatter on one world.
func waitOrder(t *testing.T, comms []*hier.Comm, d int) {
	forEach(t, comms, func(ctx context.Context, r int, c *hier.Comm) error {
		a, b := f32([]float32{1, 2}), f32([]float32{10, 20})
		i := c.Rank()
		wa := c.Start(collective.Op{Kind: collective.OpReduceScatter, Src: a, Dst: a.Slice(4*i, 4*i+4), DType: buffer.Float32, Reduce: collective.Sum})
		wb := c.Start(collective.Op{Kind: collective.OpReduceScatter, Src: b, Dst: b.Slice(4*i, 4*i+4), DType: buffer.Float32, Reduce: collective.Sum})
		first, second := wa, wb
		if r%2 == 1 {
			first, second = wb, wa
		}
		if err := errors.Join(first.Wait(ctx), second.Wait(ctx)); err != nil {
			return err
		}
		if ga, gb := floats(a)[i], floats(b)[i]; ga != float32(d*(i+1)) || gb != float32(10*d*(i+1)) {
			return fmt.Errorf("rank %d: %v %v", r, ga, gb)
		}
		return nil
	})
}

func TestConfigErrors(t *testing.T) {
	if _, err := hier.InProcess(6, 4); !errors.Is(err, hier.ErrConfig) {
		t.Errorf("6 ranks in groups of 4: %v", err)
	}
	if _, err := hier.New(single.New(buffer.Host, nil), single.New(buffer.Device, nil)); !errors.Is(err, hier.ErrConfig) {
		t.Errorf("host group, device cross: %v", err)
	}
}

// A group whose peers across groups never come fails at its deadline,
// saying which phase it was in, and matches the context's error: no hang.
func TestMissingGroupFailsAtDeadline(t *testing.T) {
	comms, err := hier.InProcess(4, 2)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r, c := range comms[:2] { // group 0 only; group 1 never starts
		wg.Go(func() {
			buf := f32([]float32{1, 2})
			errs[r] = collective.ReduceScatter(ctx, c, buf.Slice(4*r, 4*r+4), buf, buffer.Float32, collective.Sum)
		})
	}
	wg.Wait()
	for r, err := range errs {
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "across the groups") {
			t.Errorf("rank %d: %v, want the deadline across the groups", r, err)
		}
	}
}
