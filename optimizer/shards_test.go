package optimizer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/collective/single"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/backend"
	"github.com/distopt/distopt/optimizer/optimizertest"
)

// failingShards is the CPU backend whose UpdateShards or CastShards fails
// with errShard.
type failingShards struct {
	*cpu.Backend
	update bool
}

var errShard = errors.New("shard 1 is bad")

func (b failingShards) UpdateShards(as []*backend.UpdateArgs) error {
	if b.update {
		return errShard
	}
	return b.Backend.UpdateShards(as)
}

func (b failingShards) CastShards(cs []*backend.CastArgs) error {
	if !b.update {
		return errShard
	}
	return b.Backend.CastShards(cs)
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
		o, err := optimizer.New(ctx, single.New(buffer.Host, nil), failingShards{cpu.New(1), c.update}, params, optimizer.FromMap(optimizertest.InitWeights(params, 1)), cfg)
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
		if err := backend.CheckShards(as); err != nil {
			b.Fatal(err)
		}
	}
}
