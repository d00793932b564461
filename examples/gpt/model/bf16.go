package model

import "github.com/distopt/distopt/bf16"

// RoundBF16 rounds every element of x to bfloat16 the way the GPU model
// stores its bfloat16 activations: to the nearest float32 first (the GPU
// computes in float32), then to the nearest bfloat16, ties to even
// (bf16.Round).
func RoundBF16(x []float64) {
	for i, v := range x {
		x[i] = float64(bf16.Round(float32(v)))
	}
}
