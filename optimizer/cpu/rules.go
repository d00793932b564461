package cpu

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/distopt/distopt/bf16"
	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer/backend"
)

// This file holds the CPU backend's update loops, specialised for each
// storage type of moments and gradients so that they read and write the
// buffers directly: no widened copies, no per-element dispatch.

// elem is the storage of a float32 or bfloat16 array: float32 itself, or
// the bfloat16 bit pattern as uint16.
type elem interface{ float32 | uint16 }

// widen returns x as float32: itself, or bf16.ToFloat32 (exact).
// The size test is decided when the function is instantiated; the numeric
// conversion of the other branch is never run.
func widen[T elem](x T) float32 {
	if unsafe.Sizeof(x) == 4 {
		return float32(x)
	}
	return bf16.ToFloat32(uint16(x))
}

// narrow returns x stored as T: itself, or bf16.FromFloat32 (round to
// nearest even, every NaN to bf16.NaN).
func narrow[T elem](x float32) T {
	var t T
	if unsafe.Sizeof(t) == 4 {
		return T(x)
	}
	return T(bf16.FromFloat32(x))
}

// narrowAll writes narrow(src[i]) to dst[i] for every i of src.
func narrowAll[T elem](dst []T, src []float32) {
	dst = dst[:len(src)]
	for i, x := range src {
		dst[i] = narrow[T](x)
	}
}

// adamwRun is AdamWElem over p[i], m[i], v[i], g[i] for every i of p, with
// moments and gradient read through widen and moments stored through
// narrow; it returns the largest AbsBits of the new p (0 for an empty p).
//
// The loop computes AdamWElem written out (the function is above the
// inlining budget): the same separately rounded float32 operations on the
// same operands in the same order, with the explicit conversions that keep
// the compiler from fusing them, so the results are AdamWElem's whenever
// none is NaN. Which payload a NaN result carries depends on which operand
// of an addition or multiplication the compiled code puts first, which the
// compiler chooses anew in each function; so an element with a NaN among
// its results is computed again by AdamWElem itself. NaNs propagate through
// every operation, so a result without NaN means none arose on the way.
func adamwRun[M, G elem](p []float32, m, v []M, g []G, h *backend.Hyper, stepSize, shrink float32) uint32 {
	gs, b1, omb1, b2, omb2, eps, rbc2 := h.GradScale, h.Beta1, h.OneMinusBeta1, h.Beta2, h.OneMinusBeta2, h.Eps, h.SqrtVCorrection
	m, v, g = m[:len(p)], v[:len(p)], g[:len(p)]
	var key uint32
	for i, x := range p {
		gi := float32(widen(g[i]) * gs)
		x = float32(x * shrink)
		mi := float32(float32(b1*widen(m[i])) + float32(omb1*gi))
		vi := float32(float32(b2*widen(v[i])) + float32(omb2*float32(gi*gi)))
		d := float32(float32(sqrt32(vi)*rbc2) + eps)
		x = float32(x - float32(stepSize*float32(mi/d)))
		if sum := x + mi + vi; sum != sum { // a NaN, or infinities of both signs
			x, mi, vi = backend.AdamWElem(p[i], widen(m[i]), widen(v[i]), widen(g[i]), h, stepSize, shrink)
		}
		p[i], m[i], v[i] = x, narrow[M](mi), narrow[M](vi)
		key = max(key, backend.AbsBits(x))
	}
	return key
}

// sgdElem is SGDElem called through a variable, so that the call is not
// inlined: NaN payloads then come from the function's own compiled body.
var sgdElem = backend.SGDElem

// sgdRun is SGDElem over p[i], buf[i], g[i] for every i of p, storage as
// in adamwRun; it returns the largest AbsBits of the new p. SGDElem is
// inlined; an element with a NaN result is computed again by sgdElem (see
// adamwRun on NaN payloads).
func sgdRun[M, G elem](p []float32, buf []M, g []G, h *backend.Hyper, stepSize, wd float32) uint32 {
	hl := *h
	buf, g = buf[:len(p)], g[:len(p)]
	var key uint32
	for i, x := range p {
		x, b := backend.SGDElem(x, widen(buf[i]), widen(g[i]), &hl, stepSize, wd)
		if sum := x + b; sum != sum {
			x, b = sgdElem(p[i], widen(buf[i]), widen(g[i]), h, stepSize, wd)
		}
		p[i], buf[i] = x, narrow[M](b)
		key = max(key, backend.AbsBits(x))
	}
	return key
}

// sqrt32 is backend's correctly rounded float32 square root (the float64
// root of a float32 rounds to the correctly rounded float32 root).
func sqrt32(x float32) float32 { return float32(math.Sqrt(float64(x))) }

// ruleRun updates elements [off, off+len(p)) of a shard, p being the
// master's, with the factors of segment s, and returns the largest AbsBits
// of the new masters.
type ruleRun func(p []float32, off int, s *backend.Segment) uint32

// ruleRunOf returns the update loop of a's rule over a's buffers, or nil
// for backend.RuleNone. Moments of different types, or in FP8, take mixedRule
// (cpu_moments.go). It panics on a gradient type other than Float32 and
// BFloat16.
func ruleRunOf(a *backend.UpdateArgs) ruleRun {
	if a.Rule == backend.RuleNone {
		return nil
	}
	if !uniformMoments(a) {
		switch a.GradType {
		case buffer.Float32:
			return mixedRule(a, f32s(a.Grad))
		case buffer.BFloat16:
			return mixedRule(a, u16s(a.Grad))
		}
		panic(badElem(a.GradType))
	}
	switch mt, _ := a.MomentTypes(); mt {
	case backend.MomentFloat32:
		return withGrad(a, f32s(a.M), f32s(a.V))
	case backend.MomentBFloat16:
		return withGrad(a, u16s(a.M), u16s(a.V))
	}
	panic(badElem(a.MomentType))
}

// withGrad is ruleRunOf once the moments are typed.
func withGrad[M elem](a *backend.UpdateArgs, m, v []M) ruleRun {
	switch a.GradType {
	case buffer.Float32:
		return typedRule(a, m, v, f32s(a.Grad))
	case buffer.BFloat16:
		return typedRule(a, m, v, u16s(a.Grad))
	}
	panic(badElem(a.GradType))
}

// typedRule is ruleRunOf once moments and gradient are typed.
func typedRule[M, G elem](a *backend.UpdateArgs, m, v []M, g []G) ruleRun {
	h := a.Hyper
	switch a.Rule {
	case backend.RuleAdamW:
		return func(p []float32, off int, s *backend.Segment) uint32 {
			end := off + len(p)
			return adamwRun(p, m[off:end], v[off:end], g[off:end], &h, s.StepSize, s.Shrink)
		}
	case backend.RuleSGD:
		return func(p []float32, off int, s *backend.Segment) uint32 {
			end := off + len(p)
			return sgdRun(p, m[off:end], g[off:end], &h, s.StepSize, s.WeightDecay)
		}
	}
	panic(fmt.Sprintf("cpu: rule %d", a.Rule))
}

// badElem is the panic message for an unsupported element type.
func badElem(dt buffer.DType) string {
	return fmt.Sprintf("cpu: element type %s", dt)
}
