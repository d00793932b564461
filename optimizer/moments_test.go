package optimizer_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/shard"
)

// TestMomentConfigRefused checks that every bad combination of moment
// types is refused by PredictMemory (and so by New, which validates the
// same way) with ErrConfig and a message naming the problem.
func TestMomentConfigRefused(t *testing.T) {
	params := []optimizer.Param{{Name: "w", Shape: []int{8, 8}}, {Name: "b", Shape: []int{8}, HighPrecision: true}}
	FP8 := optimizer.MomentFP8
	tests := []struct {
		name string
		cfg  optimizer.Config
		want string
	}{
		{"SGD with a second moment", optimizer.Config{Rule: optimizer.RuleSGD, SecondMomentType: optimizer.MomentBFloat16}, "rule sgd has no second moment"},
		{"SGD with an FP8 second moment", optimizer.Config{Rule: optimizer.RuleSGD, FirstMomentType: FP8, SecondMomentType: FP8}, "rule sgd has no second moment"},
		{"unknown type", optimizer.Config{FirstMomentType: 9}, "moment m: unknown type MomentDType(9)"},
		{"block not supported", optimizer.Config{FirstMomentType: FP8, MomentBlock: 100}, "FP8 moment block 100: must be one of [32 64 128]"},
		{"block above alignment", optimizer.Config{SecondMomentType: FP8, Layout: shard.Options{Align: 32}}, "FP8 moment block 128 does not divide the layout alignment (32, high-precision 128)"},
		{"block above high-precision alignment", optimizer.Config{FirstMomentType: FP8, MomentBlock: 64, Layout: shard.Options{HighPrecisionAlign: 48}}, "FP8 moment block 64 does not divide the layout alignment (128, high-precision 48)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := optimizer.PredictMemory(params, 2, tc.cfg)
			if !errors.Is(err, optimizer.ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrConfig with %q", err, tc.want)
			}
		})
	}
}

// TestMomentMemory checks the planner's rows for per-moment types against
// their closed form: one byte per shard element for an FP8 moment plus a
// float32 per block, bfloat16 two bytes, float32 four.
func TestMomentMemory(t *testing.T) {
	params := []optimizer.Param{{Name: "w", Shape: []int{1000, 1000}}, {Name: "b", Shape: []int{1000}, HighPrecision: true}}
	const world = 4
	for _, c := range []struct {
		m, v  optimizer.MomentDType
		block int
		rule  optimizer.Rule
	}{
		{optimizer.MomentFP8, optimizer.MomentFP8, 128, optimizer.RuleAdamW},
		{optimizer.MomentFP8, optimizer.MomentBFloat16, 32, optimizer.RuleAdamW},
		{optimizer.MomentFloat32, optimizer.MomentFP8, 64, optimizer.RuleAdamW},
		{optimizer.MomentFP8, 0, 128, optimizer.RuleSGD},
	} {
		cfg := optimizer.Config{Rule: c.rule, FirstMomentType: c.m, SecondMomentType: c.v, MomentBlock: c.block, Recipe: fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.Block1x128}}
		rep, err := optimizer.PredictMemory(params, world, cfg)
		if err != nil {
			t.Fatal(err)
		}
		l, err := optimizer.NewLayout(params, world, shard.Options{HighPrecisionAlign: c.block})
		if err != nil {
			t.Fatal(err)
		}
		var elems, blocks int64
		for _, b := range l.Buckets {
			if b.Align%c.block != 0 {
				t.Fatalf("bucket aligned to %d, FP8 moment block %d", b.Align, c.block)
			}
			elems += int64(b.ShardSize)
			blocks += int64((b.ShardSize + c.block - 1) / c.block)
		}
		per := map[optimizer.MomentDType]int64{optimizer.MomentFP8: 1, optimizer.MomentBFloat16: 2, optimizer.MomentFloat32: 4}
		if got := rep.Get(optimizer.BufMomentM); got != per[c.m]*elems {
			t.Errorf("%+v: m row %d, want %d", c, got, per[c.m]*elems)
		}
		var scales int64
		for _, x := range []optimizer.MomentDType{c.m, c.v} {
			if x == optimizer.MomentFP8 {
				scales += 4 * blocks
			}
		}
		if c.v != 0 {
			if got := rep.Get(optimizer.BufMomentV); got != per[c.v]*elems {
				t.Errorf("%+v: v row %d, want %d", c, got, per[c.v]*elems)
			}
		}
		if got := rep.Get(optimizer.BufMomentScales); got != scales {
			t.Errorf("%+v: moment scales %d, want %d", c, got, scales)
		}
	}
}
