package model

import "math"

// Attention computes causal multi-head attention from qkv [batch·seq, 3h]
// (the fused projection: queries in columns [0, h), keys in [h, 2h),
// values in [2h, 3h); head k uses columns [k·d, (k+1)·d) of each, d = h/heads)
// into y [batch·seq, h], as the GPU path does: scores s = q·kᵀ per (batch,
// head), p = CausalSoftmax(s, 1/sqrt(d)), y = p·v. p [batch, heads, seq, seq]
// is kept for the backward pass.
func Attention(y, p, qkv []float64, batch, seq, h, heads int) {
	d := h / heads
	s := make([]float64, seq*seq)
	for b := range batch {
		for k := range heads {
			pm := p[(b*heads+k)*seq*seq : (b*heads+k+1)*seq*seq]
			for i := range seq {
				q := qkv[(b*seq+i)*3*h+k*d:]
				for j := 0; j <= i; j++ {
					kj := qkv[(b*seq+j)*3*h+h+k*d:]
					dot := 0.0
					for c := range d {
						dot += q[c] * kj[c]
					}
					s[i*seq+j] = dot
				}
			}
			CausalSoftmax(pm, s, 1, seq, 1/math.Sqrt(float64(d)))
			for i := range seq {
				out := y[(b*seq+i)*h+k*d : (b*seq+i)*h+(k+1)*d]
				clear(out)
				for j := 0; j <= i; j++ {
					v := qkv[(b*seq+j)*3*h+2*h+k*d:]
					for c := range d {
						out[c] += pm[i*seq+j] * v[c]
					}
				}
			}
		}
	}
}

// AttentionBackward sets dqkv [batch·seq, 3h] from dy [batch·seq, h], the
// probabilities p and qkv of Attention: dp = dy·vᵀ, dv = pᵀ·dy,
// ds = CausalSoftmaxBackward(p, dp), dq = ds·k, dk = dsᵀ·q.
func AttentionBackward(dqkv, dy, p, qkv []float64, batch, seq, h, heads int) {
	d := h / heads
	clear(dqkv[:batch*seq*3*h])
	dp := make([]float64, seq*seq)
	ds := make([]float64, seq*seq)
	row := func(buf []float64, b, i, part, k int) []float64 {
		o := (b*seq+i)*3*h + part*h + k*d
		return buf[o : o+d]
	}
	for b := range batch {
		for k := range heads {
			pm := p[(b*heads+k)*seq*seq : (b*heads+k+1)*seq*seq]
			clear(dp)
			for i := range seq {
				dyi := dy[(b*seq+i)*h+k*d : (b*seq+i)*h+(k+1)*d]
				for j := 0; j <= i; j++ {
					v, dv := row(qkv, b, j, 2, k), row(dqkv, b, j, 2, k)
					for c := range d {
						dp[i*seq+j] += dyi[c] * v[c]
						dv[c] += pm[i*seq+j] * dyi[c]
					}
				}
			}
			CausalSoftmaxBackward(ds, pm, dp, 1, seq, 1/math.Sqrt(float64(d)))
			for i := range seq {
				q, dq := row(qkv, b, i, 0, k), row(dqkv, b, i, 0, k)
				for j := 0; j <= i; j++ {
					kj, dk := row(qkv, b, j, 1, k), row(dqkv, b, j, 1, k)
					g := ds[i*seq+j]
					for c := range d {
						dq[c] += g * kj[c]
						dk[c] += g * q[c]
					}
				}
			}
		}
	}
}
