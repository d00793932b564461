package model

import "math"

// CausalSoftmax computes, for each of the n matrices [t, t] of s (scores,
// row-major), p[i, j] = exp(scale·s[i, j] - m_i) / Σ_{k≤i} exp(scale·s[i, k] - m_i)
// for j ≤ i and 0 for j > i, m_i being the row's maximum of scale·s over
// k ≤ i. The entries of s above the diagonal are not read.
func CausalSoftmax(p, s []float64, n, t int, scale float64) {
	for m := range n {
		for i := range t {
			row := s[(m*t+i)*t : (m*t+i)*t+t]
			out := p[(m*t+i)*t : (m*t+i)*t+t]
			mx := math.Inf(-1)
			for j := 0; j <= i; j++ {
				mx = max(mx, scale*row[j])
			}
			sum := 0.0
			for j := 0; j <= i; j++ {
				out[j] = math.Exp(scale*row[j] - mx)
				sum += out[j]
			}
			for j := range t {
				if j <= i {
					out[j] /= sum
				} else {
					out[j] = 0
				}
			}
		}
	}
}

// CausalSoftmaxBackward sets ds, the gradient with respect to the scores
// s of CausalSoftmax, from p and dp: ds[i, j] = scale·p[i, j]·(dp[i, j] -
// Σ_{k≤i} p[i, k]·dp[i, k]) for j ≤ i, 0 above the diagonal.
func CausalSoftmaxBackward(ds, p, dp []float64, n, t int, scale float64) {
	for r := range n * t {
		i := r % t
		pr, dpr, dsr := p[r*t:r*t+t], dp[r*t:r*t+t], ds[r*t:r*t+t]
		dot := 0.0
		for j := 0; j <= i; j++ {
			dot += pr[j] * dpr[j]
		}
		for j := range t {
			if j <= i {
				dsr[j] = scale * pr[j] * (dpr[j] - dot)
			} else {
				dsr[j] = 0
			}
		}
	}
}
