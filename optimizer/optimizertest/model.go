package optimizertest

import (
	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/shard"
)

// AwkwardParams returns a new slice of eight parameters with awkward sizes:
// primes ("prime" has 8191 elements), one element, a scalar (shape []int{}),
// a matrix larger than a bucket of Configs ("big", 131x257), sizes smaller
// than the world, and high-precision parameters without weight decay ("b1",
// "tiny"). "prime" and "big" are in group 1, the others in group 0.
func AwkwardParams() []optimizer.Param {
	return []optimizer.Param{
		{Name: "w1", Shape: []int{37, 129}},
		{Name: "b1", Shape: []int{129}, HighPrecision: true, NoDecay: true},
		{Name: "one", Shape: []int{1}},
		{Name: "prime", Shape: []int{8191}, Group: 1},
		{Name: "big", Shape: []int{131, 257}, Group: 1},
		{Name: "tiny", Shape: []int{2}, HighPrecision: true, NoDecay: true},
		{Name: "scalar", Shape: []int{}, NoDecay: true},
		{Name: "w2", Shape: []int{3, 5}},
	}
}

// Numel returns the number of elements of a shape: the product of its
// dimensions, 1 for a scalar.
func Numel(shape []int) int {
	n := 1
	for _, s := range shape {
		n *= s
	}
	return n
}

// Groups returns two parameter groups: "main", warmup-cosine from 1e-2 to
// 1e-3 over 6 steps (2 of warmup) with weight decay 0.1, and "slow", a
// constant 3e-3 with weight decay 0.01.
func Groups() []optimizer.Group {
	return []optimizer.Group{
		{Name: "main", LR: optimizer.WarmupCosine{Peak: 1e-2, Min: 1e-3, Warmup: 2, Total: 6}, WeightDecay: 0.1},
		{Name: "slow", LR: optimizer.Constant(3e-3), WeightDecay: 0.01},
	}
}

// Configs returns a new map of configurations by name. All have Groups,
// MaxGradNorm 4 and buckets of 6000 elements; they differ in one respect:
// one per FP8 recipe, named by Recipe.String (E4M3 and E5M2 current
// scaling, E4M3 delayed, 1x128 and 128x128 blocks, MXFP8 in both formats);
// "bf16 moments, fp32 grads" (with float32 high-precision copies); "sgd"
// (momentum 0.9); and "loss scaler" (initial scale 1024, growth every 2
// steps); "fp8 moments" (both, blocks of 128), "fp8 m, bf16 v, blocks of
// 32, 128x128" and "sgd, fp8 momentum, blocks of 64". The loss scaler is a pointer: give each rank a copy.
func Configs() map[string]optimizer.Config {
	base := optimizer.Config{Groups: Groups(), MaxGradNorm: 4, Layout: shard.Options{BucketElements: 6000}}
	out := map[string]optimizer.Config{}
	for _, rc := range []fp8.Recipe{
		{Format: fp8.E4M3, Scaling: fp8.TensorCurrent},
		{Format: fp8.E5M2, Scaling: fp8.TensorCurrent, Margin: 1, PowerOf2: true},
		{Format: fp8.E4M3, Scaling: fp8.TensorDelayed, HistoryLen: 4},
		{Format: fp8.E4M3, Scaling: fp8.Block1x128},
		{Format: fp8.E4M3, Scaling: fp8.Block128x128},
		{Format: fp8.E4M3, Scaling: fp8.MXFP8},
		{Format: fp8.E5M2, Scaling: fp8.MXFP8},
	} {
		c := base
		c.Recipe = rc
		out[rc.String()] = c
	}
	c := base
	c.FirstMomentType, c.SecondMomentType, c.GradType, c.HighPrecisionType = optimizer.MomentBFloat16, optimizer.MomentBFloat16, buffer.Float32, buffer.Float32
	out["bf16 moments, fp32 grads"] = c
	c = base
	c.Rule, c.Momentum = optimizer.RuleSGD, 0.9
	out["sgd"] = c
	c = base
	c.LossScaler = &optimizer.LossScaler{InitScale: 1024, GrowthInterval: 2}
	out["loss scaler"] = c
	c = base
	c.FirstMomentType, c.SecondMomentType = optimizer.MomentFP8, optimizer.MomentFP8
	out["fp8 moments"] = c
	c = base
	c.Recipe = fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.Block128x128}
	c.FirstMomentType, c.SecondMomentType, c.MomentBlock = optimizer.MomentFP8, optimizer.MomentBFloat16, 32
	out["fp8 m, bf16 v, blocks of 32, 128x128"] = c
	c = base
	c.Rule, c.Momentum, c.FirstMomentType, c.MomentBlock = optimizer.RuleSGD, 0.9, optimizer.MomentFP8, 64
	out["sgd, fp8 momentum, blocks of 64"] = c
	return out
}

// GradType returns the gradient type cfg communicates in: cfg.GradType, or
// buffer.BFloat16 when it is unset.
func GradType(cfg optimizer.Config) buffer.DType {
	if cfg.GradType == 0 {
		return buffer.BFloat16
	}
	return cfg.GradType
}
