package model

import "math"

// LNEps is the epsilon of every LayerNorm (PyTorch's default).
const LNEps = 1e-5

// LayerNorm normalizes each row of x [rows, n]: mean[r] = Σx/n,
// rstd[r] = 1/sqrt(Σ(x-mean)²/n + LNEps) (biased variance, as PyTorch),
// y = (x-mean)·rstd·w + b. mean and rstd are kept for the backward pass.
func LayerNorm(y, mean, rstd, x, w, b []float64, rows, n int) {
	for r := range rows {
		xr := x[r*n : (r+1)*n]
		m := 0.0
		for _, v := range xr {
			m += v
		}
		m /= float64(n)
		va := 0.0
		for _, v := range xr {
			va += (v - m) * (v - m)
		}
		s := 1 / math.Sqrt(va/float64(n)+LNEps)
		mean[r], rstd[r] = m, s
		for i, v := range xr {
			y[r*n+i] = (v-m)*s*w[i] + b[i]
		}
	}
}

// LayerNormBackward accumulates the gradients of LayerNorm given dy:
// with xhat = (x-mean)·rstd and g = dy·w,
// dx += rstd·(g - mean(g) - xhat·mean(g·xhat)), dw += Σ_r dy·xhat,
// db += Σ_r dy.
func LayerNormBackward(dx, dw, db, dy, x, mean, rstd, w []float64, rows, n int) {
	xhat := make([]float64, n)
	for r := range rows {
		dyr, xr := dy[r*n:(r+1)*n], x[r*n:(r+1)*n]
		var mg, mgx float64
		for i, v := range xr {
			xhat[i] = (v - mean[r]) * rstd[r]
			g := dyr[i] * w[i]
			mg += g
			mgx += g * xhat[i]
			dw[i] += dyr[i] * xhat[i]
			db[i] += dyr[i]
		}
		mg /= float64(n)
		mgx /= float64(n)
		for i := range xr {
			dx[r*n+i] += rstd[r] * (dyr[i]*w[i] - mg - xhat[i]*mgx)
		}
	}
}
