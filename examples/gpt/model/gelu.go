package model

import "math"

// geluK is sqrt(2/π), geluC the cubic coefficient of GPT-2's GELU.
var geluK = math.Sqrt(2 / math.Pi)

const geluC = 0.044715

// GELU computes y = 0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³))), GPT-2's
// tanh approximation (PyTorch's gelu(approximate="tanh")), elementwise.
func GELU(y, x []float64) {
	for i, v := range x {
		y[i] = 0.5 * v * (1 + math.Tanh(geluK*(v+geluC*v*v*v)))
	}
}

// GELUBackward sets dx = dy·GELU'(x), with
// GELU'(x) = 0.5·(1+t) + 0.5·x·(1-t²)·sqrt(2/π)·(1 + 3·0.044715·x²),
// t = tanh(sqrt(2/π)·(x + 0.044715·x³)).
func GELUBackward(dx, dy, x []float64) {
	for i, v := range x {
		t := math.Tanh(geluK * (v + geluC*v*v*v))
		dx[i] = dy[i] * (0.5*(1+t) + 0.5*v*(1-t*t)*geluK*(1+3*geluC*v*v))
	}
}
