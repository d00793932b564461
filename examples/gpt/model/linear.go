package model

// Linear computes y[r, o] = b[o] + Σ_i x[r, i]·w[o, i] for rows r: x is
// [rows, in], w [out, in] (row-major), y [rows, out]; b may be nil (no bias).
func Linear(y, x, w, b []float64, rows, in, out int) {
	for r := range rows {
		xr := x[r*in : (r+1)*in]
		for o := range out {
			s := 0.0
			if b != nil {
				s = b[o]
			}
			wo := w[o*in : (o+1)*in]
			for i, v := range xr {
				s += v * wo[i]
			}
			y[r*out+o] = s
		}
	}
}

// LinearBackward accumulates the gradients of Linear given dy [rows, out]:
// dx += dy·w, dw += dyᵀ·x, db += Σ_r dy[r]. Any of dx, dw, db may be nil.
func LinearBackward(dx, dw, db, dy, x, w []float64, rows, in, out int) {
	for r := range rows {
		dyr := dy[r*out : (r+1)*out]
		xr := x[r*in : (r+1)*in]
		for o, g := range dyr {
			if g == 0 {
				continue
			}
			if db != nil {
				db[o] += g
			}
			wo := w[o*in : (o+1)*in]
			if dx != nil {
				dxr := dx[r*in : (r+1)*in]
				for i, v := range wo {
					dxr[i] += g * v
				}
			}
			if dw != nil {
				dwo := dw[o*in : (o+1)*in]
				for i, v := range xr {
					dwo[i] += g * v
				}
			}
		}
	}
}
