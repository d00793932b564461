package backendtest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer/backend"
)

// controlCase is how an update or cast of the suite is controlled.
type controlCase int

const (
	noControl   controlCase = iota // no control block: Hyper.GradScale
	takeControl                    // a block whose GradScale differs from Hyper's
	skipControl                    // a block whose Skip is set: nothing written
)

// controlBlock returns an encoded control block for case c.
func controlBlock(r *rand.Rand, c controlCase) []byte {
	blk := backend.Control{Scale: 1, Used: 1, Clip: 1, Norm: r.Float64(), GradScale: float32(0.25 + r.Float64()/8)}
	if c == skipControl {
		blk.Skip, blk.Norm, blk.NonFinite = 1, math.Inf(1), 3
	}
	return blk.Encode()
}

// randomBlock returns a control block with a random configuration and
// state: clipping or not, a loss scaler or not.
func randomBlock(r *rand.Rand) backend.Control {
	c := backend.Control{Scale: 1, Step: int64(r.IntN(1000))}
	if r.IntN(2) == 0 {
		c.MaxNorm = math.Ldexp(r.Float64(), r.IntN(30)-10)
	}
	if r.IntN(2) == 0 {
		c.Growth, c.Backoff, c.MinScale, c.MaxScale = 2, 0.5, 1, 1<<24
		c.Interval, c.Good = int64(1+r.IntN(3)), int64(r.IntN(2))
		c.Scale = math.Ldexp(1, r.IntN(25))
	}
	return c
}

// randomStats returns reduced statistics: the normalised limbs of one to
// eight ranks summed, each rank's of a sum of squares of random
// magnitude, sometimes with non-finite elements.
func randomStats(r *rand.Rand) [backend.StatsLen]int64 {
	var s [backend.StatsLen]int64
	for range 1 + r.IntN(8) {
		var x [backend.StatsLen]int64
		for range 1 + r.IntN(50) {
			backend.AddSquare(&x, float32(math.Ldexp(r.NormFloat64(), r.IntN(200)-100)))
		}
		backend.Normalize(&x)
		for i := range s {
			s[i] += x[i]
		}
	}
	if r.IntN(4) == 0 {
		s[backend.NormLimbs] += int64(1 + r.IntN(3))
	}
	return s
}

// Control runs sequences of steps' statistics through Control on both
// backends, from random blocks, and compares the blocks byte for byte
// after each step (norm, clip coefficient, gradient scale, skip, loss
// scaler, step count).
func Control(t *testing.T, be backend.Backend) {
	for run := range 40 {
		t.Run(fmt.Sprint(run), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(run), 17))
			p := newPair(t, be)
			blk := randomBlock(r)
			cb := p.upload("control", blk.Encode(), bytesExact)
			for range 8 {
				st := randomStats(r)
				raw := make([]byte, 8*backend.StatsLen)
				for i, x := range st {
					for k := range 8 {
						raw[8*i+k] = byte(uint64(x) >> (8 * k))
					}
				}
				sb := p.upload("stats", raw, bytesExact)
				must(t, p.ref.Control(cb.ref, sb.ref))
				must(t, p.be.Control(cb.be, sb.be))
				p.check(cb, sb)
				blk.Advance(&st)
				got := make([]byte, backend.ControlBytes)
				must(t, p.ref.Read(got, cb.ref, 0))
				if bad := diff(blk.Encode(), got, bytesExact); len(bad) > 0 {
					t.Fatalf("reference block against Advance: %s", bad[0])
				}
			}
		})
	}
}

// Controlled checks the update, the cast, and a DeviceScaler's scales with
// a control block: with it the update takes the block's gradient scale,
// and a skipped step leaves every buffer as it was.
func Controlled(t *testing.T, be backend.Backend) {
	rules := []struct {
		r      backend.Rule
		mt, gt buffer.DType
	}{
		{backend.RuleAdamW, buffer.Float32, buffer.BFloat16},
		{backend.RuleAdamW, buffer.BFloat16, buffer.Float32},
		{backend.RuleSGD, buffer.Float32, buffer.Float32},
	}
	for ci, rc := range recipeCases() {
		for ri, ru := range rules {
			for _, c := range []controlCase{takeControl, skipControl} {
				t.Run(fmt.Sprintf("update/%s/%v/m=%v/control=%d", rc.name, ru.r, ru.mt, c), func(t *testing.T) {
					r := rand.New(rand.NewPCG(uint64(ci), uint64(ri*4)+uint64(c)))
					updateCase(t, newPair(t, be), r, rc, ru.r, ru.mt, ru.gt, false, c)
				})
			}
		}
	}
	for _, c := range []controlCase{takeControl, skipControl} {
		t.Run(fmt.Sprintf("cast/control=%d", c), func(t *testing.T) { castControlled(t, be, c) })
		if _, ok := be.(backend.DeviceScaler); ok {
			t.Run(fmt.Sprintf("scales/control=%d", c), func(t *testing.T) { scalesControlled(t, be, c) })
		}
		if _, ok := be.(backend.DelayedScaler); ok {
			for _, red := range []fp8.HistoryReduce{fp8.HistoryMax, fp8.HistoryMostRecent} {
				for _, l := range []int{1, 4, 33, 129, 300, 1024} { // 1024: Transformer Engine's default
					t.Run(fmt.Sprintf("delayed/%v/l=%d/control=%d", red, l, c), func(t *testing.T) { delayedControlled(t, be, c, red, l, 45) })
				}
				// more rows than a GPU's resident warps (8448 on an H100 in
				// blocks of 256): the grid-stride loop over rows
				t.Run(fmt.Sprintf("delayed/%v/l=4/n=20000/control=%d", red, c), func(t *testing.T) { delayedControlled(t, be, c, red, 4, 20000) })
			}
		}
	}
}

// castControlled casts a mixed layout with a control block.
func castControlled(t *testing.T, be backend.Backend, c controlCase) {
	modes := []backend.Mode{backend.ModeTensorCurrent, backend.ModeTile, backend.ModeTensorDelayed}
	r := rand.New(rand.NewPCG(5, uint64(c)))
	p := newPair(t, be)
	l := randomLayout(r, modes, 128, 1)
	scale := make([]float32, l.slots)
	for i := range scale {
		scale[i], _ = fp8.ScaleFromAmax(float32(r.Float64()*2), fp8.E4M3, 0, false)
	}
	mb := p.upload("master", encode(values(r, l.n, 1, false), buffer.Float32), float32s)
	fb := p.upload("fp8", filled(l.n), bytesExact)
	sb := p.upload("scale", encode(scale, buffer.Float32), bytesExact)
	cb := p.upload("control", controlBlock(r, c), bytesExact)
	for side, b := range []backend.Backend{p.ref, p.be} {
		pick := func(x buf) buffer.Buffer { return []buffer.Buffer{x.ref, x.be}[side] }
		must(t, b.Cast(&backend.CastArgs{N: l.n, Master: pick(mb), Segments: l.segs, Format: fp8.E4M3, FP8: pick(fb), Scale: pick(sb), Control: pick(cb)}))
	}
	p.check(mb, fb, sb)
	if c == skipControl {
		p.untouched(fb)
	} else if bad := diff(filled(l.n), readRef(p, fb), bytesExact); len(bad) == 0 && l.n > 0 {
		t.Errorf("cast with a taken step's block wrote nothing")
	}
}

// scalesControlled derives scales on be (a DeviceScaler) with a control
// block: fp8.ScaleFromAmax of every amax, or nothing when skipped.
func scalesControlled(t *testing.T, be backend.Backend, c controlCase) {
	r := rand.New(rand.NewPCG(6, uint64(c)))
	const n = 37
	amax := make([]float32, n)
	for i := range amax {
		amax[i] = float32(math.Ldexp(r.Float64(), r.IntN(20)-10))
	}
	old := filled(4 * n)
	bufs := make([]buffer.Buffer, 4)
	for i, init := range [][]byte{old, old, encode(amax, buffer.Float32), controlBlock(r, c)} {
		b, err := be.Alloc(len(init))
		must(t, err)
		defer be.Free(b)
		must(t, be.Write(b, 0, init))
		bufs[i] = b
	}
	must(t, be.(backend.DeviceScaler).ScalesFromAmax(bufs[0], bufs[1], bufs[2], bufs[3], n, fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}))
	wantS, wantInv := old, old
	if c != skipControl {
		s, inv := make([]float32, n), make([]float32, n)
		for i, a := range amax {
			s[i], inv[i] = fp8.ScaleFromAmax(a, fp8.E4M3, 0, false)
		}
		wantS, wantInv = encode(s, buffer.Float32), encode(inv, buffer.Float32)
	}
	for i, want := range [][]byte{wantS, wantInv} {
		got := make([]byte, 4*n)
		must(t, be.Read(got, bufs[i], 0))
		if bad := diff(want, got, bytesExact); len(bad) > 0 {
			t.Errorf("buffer %d of ScalesFromAmax with control %d: %s", i, c, bad[0])
		}
	}
}

// readRef returns the reference's bytes of b.
func readRef(p *pair, b buf) []byte {
	got := make([]byte, b.ref.Len())
	must(p.t, p.ref.Read(got, b.ref, 0))
	return got
}

// delayedControlled advances delayed scaling's histories on be (a
// DelayedScaler) with a control block, against fp8.AmaxHistory: the cast
// scales and scale_inv of the scales held, every history with the new
// amax pushed, and the next scales; nothing when skipped. Amaxes and
// histories hold zeros, subnormals, infinities and NaNs.
func delayedControlled(t *testing.T, be backend.Backend, c controlCase, red fp8.HistoryReduce, l, n int) {
	r := rand.New(rand.NewPCG(uint64(l), uint64(c)*2+uint64(red)))
	rc := fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorDelayed, HistoryLen: l, HistoryReduce: red, Margin: r.IntN(2)}
	special := []float32{0, float32(math.Inf(1)), float32(math.NaN()), 1e-40, 448, 3e38}
	pick := func() float32 {
		if r.IntN(6) == 0 {
			return special[r.IntN(len(special))]
		}
		return float32(math.Ldexp(r.Float64(), r.IntN(30)-15))
	}
	scale, amax, hist := make([]float32, n), make([]float32, n), make([]float32, n*l)
	wantScale, wantInv, wantCast, wantHist := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n*l)
	for i := range n {
		scale[i] = float32(math.Ldexp(1+r.Float64(), r.IntN(20)-10))
		amax[i] = pick()
		h := fp8.NewAmaxHistory(l, red)
		for j := range l {
			hist[i*l+j] = pick()
			h.Push(hist[i*l+j])
		}
		h.Push(amax[i])
		wantCast[i], wantInv[i] = scale[i], 1/scale[i]
		wantScale[i], _ = h.Scale(rc.Format, rc.Margin, rc.PowerOf2)
		copy(wantHist[i*l:], h.Values())
	}
	inits := [][]byte{encode(scale, buffer.Float32), filled(4 * n), filled(4 * n), encode(hist, buffer.Float32),
		encode(amax, buffer.Float32), controlBlock(r, c)}
	bufs := make([]buffer.Buffer, len(inits))
	for i, init := range inits {
		b, err := be.Alloc(len(init))
		must(t, err)
		defer be.Free(b)
		must(t, be.Write(b, 0, init))
		bufs[i] = b
	}
	must(t, be.(backend.DelayedScaler).DelayedScales(bufs[0], bufs[1], bufs[2], bufs[3], bufs[4], bufs[5], n, l, rc))
	want := [][]byte{encode(wantScale, buffer.Float32), encode(wantInv, buffer.Float32), encode(wantCast, buffer.Float32), encode(wantHist, buffer.Float32)}
	if c == skipControl {
		want = inits[:4]
	}
	for i, name := range []string{"scale", "scale_inv", "cast", "history"} {
		got := make([]byte, len(want[i]))
		must(t, be.Read(got, bufs[i], 0))
		if bad := diff(want[i], got, bytesExact); len(bad) > 0 {
			t.Errorf("%s after DelayedScales with control %d: %d mismatches; first: %s", name, c, len(bad), bad[0])
		}
	}
}
