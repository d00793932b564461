package optimizer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective/single"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/backend"
	"github.com/distopt/distopt/optimizer/optimizertest"
)

// TestCheckShards checks what UpdateShards and CastShards refuse: no
// shards, shards that differ in a scalar or in the launch's buffers, a
// shard with both FP8 bytes and a high-precision copy, high-precision
// copies of two types; and that shards differing only in their own
// buffers, sizes, segments, seeds and positions pass.
func TestCheckShards(t *testing.T) {
	buf := func(n int) buffer.Buffer { return make(buffer.HostBuffer, n) }
	amax, scale := buf(8), buf(8)
	shard := func(n int) *backend.UpdateArgs {
		return &backend.UpdateArgs{Rule: optimizer.RuleAdamW, Hyper: backend.Hyper{Beta1: 0.9}, N: n,
			Master: buf(4 * n), M: buf(4 * n), V: buf(4 * n), Grad: buf(2 * n), FP8: buf(n),
			GradType: buffer.BFloat16, MomentType: buffer.Float32, Amax: amax, Scale: scale,
			Segments: []backend.Segment{{Len: n, Mode: backend.ModeTensorCurrent}}, MomentSeed: uint32(n), MomentBase: n}
	}
	ok := []*backend.UpdateArgs{shard(4), shard(8), shard(12)}
	ok[2].FP8, ok[2].HP, ok[2].HPType = nil, buf(24), buffer.BFloat16
	if err := optimizer.CheckShards(ok); err != nil {
		t.Errorf("shards alike: %v", err)
	}
	for _, tc := range []struct {
		name, want string
		edit       func(a *backend.UpdateArgs)
	}{
		{"hyper", "Hyper", func(a *backend.UpdateArgs) { a.Hyper.Beta1 = 0.8 }},
		{"rule", "Rule", func(a *backend.UpdateArgs) { a.Rule = optimizer.RuleSGD }},
		{"amax buffer", "Amax", func(a *backend.UpdateArgs) { a.Amax = buf(8) }},
		{"grad type", "GradType", func(a *backend.UpdateArgs) { a.GradType = buffer.Float32 }},
		{"both outputs", "both FP8 bytes and a high-precision copy", func(a *backend.UpdateArgs) { a.HP = buf(16) }},
	} {
		as := []*backend.UpdateArgs{shard(4), shard(8)}
		tc.edit(as[1])
		err := optimizer.CheckShards(as)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "shard 1") {
			t.Errorf("%s: error %v, want one naming shard 1 and %q", tc.name, err, tc.want)
		}
	}
	two := []*backend.UpdateArgs{shard(4), shard(8)}
	for i, dt := range []buffer.DType{buffer.BFloat16, buffer.Float32} {
		two[i].FP8, two[i].HP, two[i].HPType = nil, buf(32), dt
	}
	if err := optimizer.CheckShards(two); err == nil || !strings.Contains(err.Error(), "HPType") {
		t.Errorf("copies of two types: error %v, want one naming HPType", err)
	}
	two[0].HPType = 0 // no type given, then bfloat16: two types too
	if err := optimizer.CheckShards(two); err == nil || !strings.Contains(err.Error(), "HPType") {
		t.Errorf("copies of no type and bfloat16: error %v, want one naming HPType", err)
	}
	if err := optimizer.CheckShards(nil); err == nil {
		t.Error("no shards: no error")
	}
	c := func(n int) *backend.CastArgs {
		return &backend.CastArgs{N: n, Master: buf(4 * n), FP8: buf(n), Scale: scale}
	}
	if err := optimizer.CheckCastShards([]*backend.CastArgs{c(4), c(8)}); err != nil {
		t.Errorf("casts alike: %v", err)
	}
	other := c(8)
	other.Scale = buf(8)
	if err := optimizer.CheckCastShards([]*backend.CastArgs{c(4), other}); err == nil || !strings.Contains(err.Error(), "Scale") {
		t.Errorf("casts with other scales: error %v, want one naming Scale", err)
	}
}

// failingShards is the CPU backend whose UpdateShards or CastShards fails
// with errShard.
type failingShards struct {
	*optimizer.CPU
	update bool
}

var errShard = errors.New("shard 1 is bad")

func (b failingShards) UpdateShards(as []*backend.UpdateArgs) error {
	if b.update {
		return errShard
	}
	return b.CPU.UpdateShards(as)
}

func (b failingShards) CastShards(cs []*backend.CastArgs) error {
	if !b.update {
		return errShard
	}
	return b.CPU.CastShards(cs)
}

// TestShardErrorsNameBuckets checks that a failing one-call update or cast
// (here New's, which casts the initial masters through the same calls)
// fails with the backend's error wrapped, saying which bucket a shard index
// names (a cast's shards are the buckets that cast, in order).
func TestShardErrorsNameBuckets(t *testing.T) {
	params := optimizertest.AwkwardParams()
	cfg := optimizertest.Configs()["E4M3 TensorCurrent(margin=0, pow2=false)"]
	for _, c := range []struct {
		update bool
		want   string
	}{
		{true, "optimizer: update of %d buckets in one call (shard i is bucket i): shard 1 is bad"},
		{false, "optimizer: cast of buckets %v in one call (shard i is the i-th of them): shard 1 is bad"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		o, err := optimizer.New(ctx, single.New(buffer.Host, nil), failingShards{optimizer.NewCPU(1), c.update}, params, optimizer.FromMap(optimizertest.InitWeights(params, 1)), cfg)
		cancel()
		if err == nil {
			o.Close()
			t.Fatalf("update %t: New succeeded on a backend whose shard calls fail", c.update)
		}
		l, lerr := optimizer.NewLayout(params, 1, cfg.Layout)
		if lerr != nil {
			t.Fatal(lerr)
		}
		var want string
		if c.update {
			want = fmt.Sprintf(c.want, len(l.Buckets))
		} else {
			var cast []int
			for i, b := range l.Buckets {
				if !b.HighPrecision {
					cast = append(cast, i)
				}
			}
			want = fmt.Sprintf(c.want, cast)
		}
		if !errors.Is(err, errShard) || !strings.Contains(fmt.Sprint(err), want) {
			t.Errorf("error %v, want one containing %q and wrapping the backend's", err, want)
		}
	}
}

// BenchmarkCheckShards measures CheckShards on 25 shards alike (the 1.3B
// GPT's buckets at width 1024): host time the GPU backend spends on every
// update.
func BenchmarkCheckShards(b *testing.B) {
	amax, scale, ctl := make(buffer.HostBuffer, 8), make(buffer.HostBuffer, 8), make(buffer.HostBuffer, 64)
	as := make([]*backend.UpdateArgs, 25)
	for i := range as {
		n := 1 << 10
		as[i] = &backend.UpdateArgs{Rule: optimizer.RuleAdamW, Hyper: backend.Hyper{Beta1: 0.9, Beta2: 0.95}, N: n,
			Master: make(buffer.HostBuffer, 4*n), M: make(buffer.HostBuffer, 4*n), V: make(buffer.HostBuffer, 4*n),
			Grad: make(buffer.HostBuffer, 2*n), FP8: make(buffer.HostBuffer, n), Control: ctl,
			GradType: buffer.BFloat16, MomentType: buffer.Float32, Amax: amax, Scale: scale,
			Segments: []backend.Segment{{Len: n, Mode: backend.ModeTensorCurrent}}, MomentSeed: uint32(i), MomentBase: n}
	}
	for b.Loop() {
		if err := optimizer.CheckShards(as); err != nil {
			b.Fatal(err)
		}
	}
}
