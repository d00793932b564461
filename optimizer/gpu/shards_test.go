package gpu

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective/nccl"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/kernels"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/backend"
	"github.com/distopt/distopt/optimizer/optimizertest"
	"github.com/distopt/distopt/shard"
)

// bucketByBucket is the GPU backend with its backend.ShardUpdater and
// backend.UpdatePlanner hidden (the fields shadow the promoted methods):
// the optimizer updates and casts it one bucket at a time, as before one
// launch covered every bucket. Every other optional interface stays.
type bucketByBucket struct {
	*Backend
	UpdateShards, CastShards, PlanUpdate, PlanCast struct{}
}

// gptParams lists the parameters of a GPT-2 style model of the given
// width and depth (vocabulary 50304, 2048 positions, MLP 4x, untied head):
// the 12 tensors of each layer, norms and biases high-precision.
func gptParams(width, layers int) []optimizer.Param {
	mat := func(name string, rows, cols int) optimizer.Param {
		return optimizer.Param{Name: name, Shape: []int{rows, cols}}
	}
	vec := func(name string, n int) optimizer.Param {
		return optimizer.Param{Name: name, Shape: []int{n}, HighPrecision: true, NoDecay: true}
	}
	ps := []optimizer.Param{mat("embed.tokens", 50304, width), mat("embed.positions", 2048, width)}
	for l := range layers {
		p := fmt.Sprintf("layer%d.", l)
		ps = append(ps, vec(p+"ln1.weight", width), vec(p+"ln1.bias", width),
			mat(p+"attn.qkv.weight", 3*width, width), vec(p+"attn.qkv.bias", 3*width),
			mat(p+"attn.proj.weight", width, width), vec(p+"attn.proj.bias", width),
			vec(p+"ln2.weight", width), vec(p+"ln2.bias", width),
			mat(p+"mlp.up.weight", 4*width, width), vec(p+"mlp.up.bias", 4*width),
			mat(p+"mlp.down.weight", width, 4*width), vec(p+"mlp.down.bias", width))
	}
	return append(ps, vec("final_ln.weight", width), vec("final_ln.bias", width), mat("head.weight", 50304, width))
}

// BenchmarkStepShards measures the step of a GPT-shaped model with many
// buckets on one GPU (one-rank NCCL communicator; the 1.3B GPT's 293
// tensors at width 1024, 407M parameters, in buckets of 2^24 elements),
// updated and cast with one launch over every bucket ("shards", the
// planned path of backend.UpdatePlanner) against one launch per bucket
// ("buckets", the same backend with UpdatePlanner and ShardUpdater
// hidden), in the modes of
// BenchmarkStepAsync: sync (Step; ns/op is the step's wall time with the
// GPU work), async-idle (StepAsync on an idle GPU: step-us is the
// enqueue-only host time of the step, its reduce-scatters just started,
// so that the step waits for NCCL to take them) and async-ready (the same
// once they have been issued and have completed, as after a backward pass
// that outlasts them: the step's own host time). Current scaling and 128x128 tiles;
// "/nospin": the one-launch path with a communicator whose worker hop does
// not wait for NCCL's background launch (nccl.Config.LaunchSpin < 0);
// "/hopspin": the one-launch path with the hand-overs to the device's
// worker polled for hopSpin (cuda.Device.SetHopSpin). hops/op and
// step-hops count the hand-overs (cuda.Device.Hops) of an iteration and of
// the step.
func BenchmarkStepShards(b *testing.B) {
	ranks := map[string]*Rank{"": ncclOne(b), "/nospin": ncclOneWith(b, nccl.Config{OneRankCopies: true, LaunchSpin: -1})}
	params := gptParams(1024, 24)
	init := optimizer.FromMap(optimizertest.InitWeights(params, 1))
	for _, recipe := range []string{"current", "tile"} {
		for _, path := range []string{"shards", "buckets", "shards/nospin", "shards/hopspin"} {
			for _, mode := range []string{"sync", "async-idle", "async-ready"} {
				path, spin, _ := strings.Cut(path, "/")
				if spin != "" {
					spin = "/" + spin
				}
				r := ranks[spin]
				if spin == "/hopspin" {
					r = ranks[""]
				}
				b.Run(fmt.Sprintf("%s/%s%s/%s", recipe, path, spin, mode), func(b *testing.B) {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
					defer cancel()
					if spin == "/hopspin" {
						r.Backend.dev.SetHopSpin(hopSpin)
						defer r.Backend.dev.SetHopSpin(0)
					}
					var be backend.Backend = r.Backend
					if path == "buckets" {
						be = bucketByBucket{Backend: r.Backend}
					}
					rc, err := fp8.ParseRecipe(recipe)
					if err != nil {
						b.Fatal(err)
					}
					cfg := optimizer.Config{Recipe: rc, Layout: shard.Options{BucketElements: 1 << 24}}
					o, err := optimizer.New(ctx, r.Comm, be, params, init, cfg)
					if err != nil {
						b.Fatal(err)
					}
					defer o.Close()
					if _, ok := be.(backend.ShardUpdater); ok != (path == "shards") {
						b.Fatalf("%s: the backend is a ShardUpdater: %t", path, ok)
					}
					b.ReportMetric(float64(len(o.Layout().Buckets)), "buckets")
					for _, p := range params {
						if err := o.SetGrad(p.Name, optimizertest.Grad(p, 1, 0)); err != nil {
							b.Fatal(err)
						}
					}
					benchSteps(b, ctx, r, o, params, mode)
				})
			}
		}
	}
}

// hopSpin is the polling of a hand-over of BenchmarkStepShards' "/hopspin".
const hopSpin = 20 * time.Microsecond

// TestStepTablesPlanned checks that steps use the tables the optimizer
// planned when it was made and no cached one (a table made anew each step
// would allocate device and pinned memory on the hot path, and a CUDA
// graph capture could not find it), for every configuration of the step
// tests, FP8 moments (whose seeds change every step) included.
func TestStepTablesPlanned(t *testing.T) {
	r := ncclOne(t)
	params := optimizertest.AwkwardParams()
	cached := func() int {
		n := 0
		if err := r.Backend.onWorker(func() error { n = len(r.Backend.tables); return nil }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for name, cfg := range stepConfigs() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		o, err := optimizer.New(ctx, r.Comm, r.Backend, params, optimizer.FromMap(optimizertest.InitWeights(params, 1)), cfg)
		if err != nil {
			t.Fatal(err)
		}
		sizes := []int{cached()} // New's first cast: direct calls, cached tables
		for s := range 4 {
			for _, p := range params {
				if err := o.SetGrad(p.Name, optimizertest.Grad(p, uint64(s), s)); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := o.Step(ctx); err != nil {
				t.Fatal(err)
			}
			sizes = append(sizes, cached())
		}
		if slices.Max(sizes) != sizes[0] {
			t.Errorf("%s: cached segment tables after New and each of 4 steps: %v (steps made tables)", name, sizes)
		}
		cancel()
		if err := o.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestShardTableSeeds checks that the table of UpdateShards carries the
// shards' moment seeds only where the kernels read them (readsSeed: FP8
// second moments): two steps whose shards differ only in their seeds pack
// the same bytes otherwise, so that Backend.table copies nothing again,
// and different bytes (the same static part, one cached table) when the
// seeds are read. readsSeed must also agree with the launcher's own test
// for an FP8 v (setMoments' PerMoment and VType). Runs without a GPU.
func TestShardTableSeeds(t *testing.T) {
	F32, BF16, FP8 := backend.MomentFloat32, backend.MomentBFloat16, backend.MomentFP8
	cases := []struct {
		rule backend.Rule
		m, v backend.MomentDType
		read bool
	}{
		{backend.RuleAdamW, FP8, FP8, true},
		{backend.RuleAdamW, BF16, FP8, true},
		{backend.RuleAdamW, F32, FP8, true},
		{backend.RuleAdamW, FP8, BF16, false},
		{backend.RuleAdamW, F32, F32, false},
		{backend.RuleAdamW, BF16, BF16, false},
		{backend.RuleSGD, FP8, 0, false},
		{backend.RuleSGD, FP8, FP8, false}, // SGD keeps no v: its VType is not read
		{backend.RuleNone, FP8, FP8, false},
	}
	for _, c := range cases {
		name := fmt.Sprintf("%v/m=%v/v=%v", c.rule, c.m, c.v)
		pack := func(step int) kernels.Table {
			as := fakeShards(c.rule, c.m, c.v, step)
			if err := backend.CheckShards(as); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if got := readsSeed(as[0]); got != c.read {
				t.Errorf("%s: readsSeed %t, want %t", name, got, c.read)
			}
			if c.rule != backend.RuleNone {
				var l kernels.UpdateLaunch
				setMoments(&l, as[0])
				if fp8V := l.PerMoment && c.rule == backend.RuleAdamW && l.VType == kernels.MomentFP8; fp8V != c.read {
					t.Errorf("%s: the launch has an FP8 second moment: %t, readsSeed %t", name, fp8V, c.read)
				}
			}
			tab, err := shardTable(as, fakePtr)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return tab
		}
		one, two := pack(1), pack(2)
		if !bytes.Equal(one.StaticPart(), two.StaticPart()) {
			t.Errorf("%s: two steps' tables differ in their static part (two cached tables)", name)
		}
		if differ := !bytes.Equal(one.Bytes, two.Bytes); differ != c.read {
			t.Errorf("%s: two steps' tables, differing only in the shards' seeds, differ in their bytes: %t (the kernels read the seeds: %t)", name, differ, c.read)
		}
	}
}

// fakeShards returns the update arguments of 3 shards of 512 elements,
// one segment each, at addresses that are not real (shardTable only packs
// them: fakePtr), with the moment seeds of step.
func fakeShards(rule backend.Rule, m, v backend.MomentDType, step int) []*backend.UpdateArgs {
	const n = 512
	as := make([]*backend.UpdateArgs, 3)
	for k := range as {
		buf := func(i int) buffer.Buffer {
			return buffer.DeviceBuffer{Ptr: uintptr(1<<20*(k+1) + 1<<16*i), Size: 4 * n}
		}
		as[k] = &backend.UpdateArgs{Rule: rule, N: n, MomentType: buffer.Float32, MType: m, VType: v,
			MomentBlock: 32, MomentSeed: backend.MomentSeed(step, k), MomentBase: n * k,
			Master: buf(0), M: buf(1), V: buf(2), Grad: buf(3), FP8: buf(4), MScales: buf(5), VScales: buf(6),
			GradType: buffer.Float32, Recipe: fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent},
			Segments: []backend.Segment{{Off: 32 * k, Len: n - 32*k, Mode: backend.ModeTensorCurrent, Factors: backend.Factors{StepSize: 1e-3, Shrink: 1}}}}
	}
	return as
}

// fakePtr is the address of a buffer of fakeShards.
func fakePtr(x buffer.Buffer) cuda.DevicePtr {
	if x == nil {
		return 0
	}
	return cuda.DevicePtr(x.(buffer.DeviceBuffer).Ptr)
}
