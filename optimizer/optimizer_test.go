package optimizer

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/collective/inproc"
)

func TestLossScalerGrowth(t *testing.T) {
	s := &LossScaler{InitScale: 8, GrowthInterval: 3, MaxScale: 32}
	if err := s.init(); err != nil {
		t.Fatal(err)
	}
	want := []float64{8, 8, 16, 16, 16, 32, 32, 32, 32, 16}
	finite := []bool{true, true, true, true, true, true, true, true, true, false}
	for i, f := range finite {
		s.update(f)
		if s.Scale() != want[i] {
			t.Fatalf("after update %d: scale %g, want %g", i, s.Scale(), want[i])
		}
	}
	if err := (&LossScaler{InitScale: 1000}).init(); !errors.Is(err, ErrConfig) {
		t.Fatalf("non-power-of-two scale accepted: %v", err)
	}
}

func TestWarmupCosine(t *testing.T) {
	s := WarmupCosine{Peak: 1, Min: 0.1, Warmup: 4, Total: 14}
	cases := []struct {
		t    int
		want float64
	}{{1, 0.25}, {2, 0.5}, {4, 1}, {9, 0.55}, {14, 0.1}, {100, 0.1}}
	for _, c := range cases {
		if got := s.LR(c.t); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("LR(%d) = %g, want %g", c.t, got, c.want)
		}
	}
}

// TestMemoryReport checks the report against the buffers actually allocated
// and the design's formula 1 + 2 + 12/d bytes per parameter; with FP8
// moments (blocks of 128), 1 + 2 + (4 + 2 + 8/128)/d; with gradients lent
// by the caller (ExternalGradients), 1 + 12/d.
func TestMemoryReport(t *testing.T) {
	params := []Param{{Name: "a", Shape: []int{1024, 1024}}, {Name: "b", Shape: []int{512, 2048}}}
	fp8m := Config{FirstMomentType: MomentFP8, SecondMomentType: MomentFP8}
	for _, c := range []struct {
		cfg     Config
		sharded float64
	}{{Config{}, 12}, {fp8m, 4 + 2 + 8.0/128}} {
		for _, d := range []int{1, 2, 4, 8} {
			checkMemoryReport(t, params, d, c.cfg, 1+2+c.sharded/float64(d))
		}
	}
	for _, d := range []int{1, 2, 4, 8} { // gradients lent by the caller: none held
		checkMemoryReport(t, params, d, Config{ExternalGradients: true}, 1+12/float64(d))
	}
}

// TestShardedMemoryReport checks the report with sharded gradients against
// the buffers allocated, the prediction, and the closed form 1 + (2 + 12)/d
// bytes per parameter plus the pool: GradBuffers buffers of the largest
// bucket's BF16 gradient (with FP8 moments, 1 + (2 + 4 + 2 + 8/128)/d).
func TestShardedMemoryReport(t *testing.T) {
	params := []Param{{Name: "a", Shape: []int{1024, 1024}}, {Name: "b", Shape: []int{512, 2048}}}
	for _, c := range []struct {
		cfg     Config
		sharded float64
	}{
		{Config{ShardedGradients: true}, 2 + 12},
		{Config{ShardedGradients: true, GradBuffers: 3, FirstMomentType: MomentFP8, SecondMomentType: MomentFP8}, 2 + 4 + 2 + 8.0/128},
	} {
		for _, d := range []int{1, 2, 4, 8} {
			l, err := NewLayout(params, d, c.cfg.Layout)
			if err != nil {
				t.Fatal(err)
			}
			biggest := 0
			for _, b := range l.Buckets {
				biggest = max(biggest, b.Size)
			}
			k := max(2, c.cfg.GradBuffers)
			pool := float64(k*2*biggest) / float64(l.TotalElements())
			checkMemoryReport(t, params, d, c.cfg, 1+c.sharded/float64(d)+pool)
		}
	}
}

// checkMemoryReport checks the report of rank 0 of d ranks with cfg.
func checkMemoryReport(t *testing.T, params []Param, d int, cfg Config, want float64) {
	t.Helper()
	comms := inproc.Communicators(d)
	opts := make([]*Optimizer, d)
	var wg sync.WaitGroup
	for r := range d {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			opts[r], err = New(context.Background(), comms[r], cpu.New(1), params, func(string, int, []float32) error { return nil }, cfg)
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	o := opts[0]
	var actual int64
	for _, bk := range o.buckets {
		for _, b := range []buffer.Buffer{bk.grad, bk.acc, bk.master, bk.m, bk.v, bk.data, bk.blocks} {
			if b != nil {
				actual += int64(b.Len())
			}
		}
	}
	if o.pool != nil {
		for _, b := range o.pool.bufs {
			actual += int64(b.Len())
		}
	}
	actual += int64(o.amax.Len() + o.scale.Len() + o.scaleIn.Len() + o.stats.Len())
	rep := o.Report()
	if rep.Total() != actual {
		t.Fatalf("d=%d: report %d bytes, allocated %d\n%s", d, rep.Total(), actual, rep)
	}
	pred, err := PredictMemory(params, d, cfg)
	if err != nil || pred.Total() != rep.Total() {
		t.Fatalf("d=%d: prediction %d (%v), report %d", d, pred.Total(), err, rep.Total())
	}
	if got := rep.BytesPerParam(); math.Abs(got-want) > 1e-3 {
		t.Fatalf("d=%d: %.5f bytes/param, want %.5f", d, got, want)
	}
}
