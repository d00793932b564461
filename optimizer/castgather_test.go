package optimizer_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/backend"
	"github.com/distopt/distopt/optimizer/optimizertest"
)

// eventLog records, in order, the casts a backend was asked for and the
// all-gathers a communicator started.
type eventLog struct {
	mu     sync.Mutex
	events []string
}

func (l *eventLog) add(e string) {
	l.mu.Lock()
	l.events = append(l.events, e)
	l.mu.Unlock()
}

// castLogger is a backend that casts shard by shard (the CPU backend, its
// ShardUpdater hidden), logging each Cast ("c").
type castLogger struct {
	backend.Backend
	log *eventLog
}

func (b castLogger) Cast(a *backend.CastArgs) error {
	b.log.add("c")
	return b.Backend.Cast(a)
}

// shardLogger is the CPU backend, a ShardUpdater and UpdatePlanner,
// logging each CastShards and each run of a planned cast ("C"), and each
// Cast ("c").
type shardLogger struct {
	*cpu.Backend
	log *eventLog
}

func (b shardLogger) PlanCast(cs []*backend.CastArgs) (backend.CastPlan, error) {
	p, err := b.Backend.PlanCast(cs)
	return hookedCast{p, func() { b.log.add("C") }}, err
}

func (b shardLogger) Cast(a *backend.CastArgs) error {
	b.log.add("c")
	return b.Backend.Cast(a)
}

func (b shardLogger) CastShards(cs []*backend.CastArgs) error {
	b.log.add("C")
	return b.Backend.CastShards(cs)
}

// gatherLogger is a communicator logging each Start of all-gathers ("g").
type gatherLogger struct {
	collective.Communicator
	log *eventLog
}

func (c gatherLogger) Start(ops ...collective.Op) collective.Work {
	if len(ops) > 0 && ops[0].Kind == collective.OpAllGather {
		c.log.add("g")
	}
	return c.Communicator.Start(ops...)
}

// TestGathersFollowCasts checks the order of phases 5 and 6 in Step and
// StepAsync: on a backend that casts shard by shard, each bucket's
// all-gather starts right after its cast was queued, before the next
// bucket's cast (so that on a device one bucket travels while the next is
// cast); on a ShardUpdater, one CastShards for every bucket, then the
// gathers; one gather per bucket; with delayed scaling, which casts in the
// update's pass, the gathers alone. (That the bits are unchanged, the
// overlap and bit-identity tests show.)
func TestGathersFollowCasts(t *testing.T) {
	params := optimizertest.AwkwardParams()
	init := optimizer.FromMap(optimizertest.InitWeights(params, 1))
	recipes := map[fp8.Scaling]optimizer.Config{}
	for _, cfg := range optimizertest.Configs() {
		if cfg.Recipe.Format == fp8.E4M3 && cfg.Rule != optimizer.RuleSGD && cfg.FirstMomentType == 0 && cfg.SecondMomentType == 0 && cfg.LossScaler == nil {
			recipes[cfg.Recipe.Scaling] = cfg
		}
	}
	for _, tc := range []struct {
		scaling fp8.Scaling
		casts   bool
	}{{fp8.TensorCurrent, true}, {fp8.TensorDelayed, false}, {fp8.Block128x128, true}} {
		for _, mode := range []string{"each/sync", "each/async", "shards/sync", "shards/async"} {
			async, shards := strings.HasSuffix(mode, "/async"), strings.HasPrefix(mode, "shards")
			cfg, ok := recipes[tc.scaling]
			if !ok {
				t.Fatalf("no configuration of %v in optimizertest.Configs", tc.scaling)
			}
			ctx := context.Background()
			log := &eventLog{}
			var be backend.Backend = castLogger{cpu.New(1), log}
			if shards {
				be = shardLogger{cpu.New(1), log}
			}
			o, err := optimizer.New(ctx, gatherLogger{inproc.New(1)[0], log}, be, params, init, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := o.ZeroGrad(); err != nil {
				t.Fatal(err)
			}
			log.events = nil // New's first cast and gather
			if async {
				_, err = o.StepAsync(ctx)
				err = errors.Join(err, o.WaitGathers(ctx))
			} else {
				_, err = o.Step(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			if n := fp8Buckets(o); n < 2 {
				t.Fatalf("%d FP8 buckets: the test needs two or more", n)
			}
			var want strings.Builder
			if tc.casts && shards {
				want.WriteString("C")
			}
			for _, b := range o.Layout().Buckets {
				if tc.casts && !shards && !b.HighPrecision {
					want.WriteString("c")
				}
				want.WriteString("g")
			}
			if got := strings.Join(log.events, ""); got != want.String() {
				t.Errorf("%v, %s: casts and gathers in the order %q, want %q", tc.scaling, mode, got, want.String())
			}
			if err := o.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// fp8Buckets counts o's buckets held in FP8.
func fp8Buckets(o *optimizer.Optimizer) int {
	n := 0
	for _, b := range o.Layout().Buckets {
		if !b.HighPrecision {
			n++
		}
	}
	return n
}
