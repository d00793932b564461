package gpumodel

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/distopt/distopt/bf16"
	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/cuda/cudatest"
	"github.com/distopt/distopt/examples/gpt/model"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
)

// bf16Views allocates a bfloat16 gradient view of every parameter of cfg
// on the rig's device, filled with 0xabab (a step's first ZeroGrads must
// clear it). It returns the views and a reader of their bits.
func bf16Views(t *testing.T, r *rig, cfg model.Config) (Grads, func(name string) []uint16) {
	t.Helper()
	d := r.be.Device()
	views := map[string]optimizer.GradView{}
	for _, p := range cfg.Params() {
		n := 1
		for _, x := range p.Shape {
			n *= x
		}
		ptr := cudatest.Alloc(t, d, 2*n)
		if err := r.be.Stream().Memset8(ptr, 0xab, 2*n); err != nil {
			t.Fatal(err)
		}
		views[p.Name] = optimizer.GradView{Name: p.Name, Shape: p.Shape, DType: buffer.BFloat16,
			Data: buffer.DeviceBuffer{Ptr: uintptr(ptr), Size: 2 * n, Device: d.Ordinal()}}
	}
	grads := func(name string) (optimizer.GradView, error) {
		v, ok := views[name]
		if !ok {
			return v, fmt.Errorf("no parameter %s", name)
		}
		return v, nil
	}
	read := func(name string) []uint16 {
		b := views[name].Data.(buffer.DeviceBuffer)
		out := make([]uint16, b.Size/2)
		if err := r.be.Stream().Download(cuda.Bytes(out), cuda.DevicePtr(b.Ptr)); err != nil {
			t.Fatal(err)
		}
		return out
	}
	return grads, read
}

// bf16Key maps bfloat16 bits to integers in the order of their values
// (both zeros to 0), so that neighbours differ by 1.
func bf16Key(b uint16) int {
	if b&0x8000 != 0 {
		return -int(b & 0x7fff)
	}
	return int(b)
}

// TestGPUBF16Grads runs micro-batches on the same gathered weights with
// float32 gradient views (the optimizer's) and with bfloat16 ones
// (Options.GradType), for both head precisions, and compares:
//   - after one micro-batch from zeroed views, every small parameter's
//     bfloat16 gradient is bf16.FromFloat32 of the float32 path's, bit for
//     bit (the same float32 sums, rounded once), and every linear weight's
//     within one bfloat16 step of it (cuBLASLt may pick another algorithm
//     for a bfloat16 output, whose float32 product may differ in its last
//     bits), or, for a value that nearly cancels, within 2^-14 of the
//     weight's largest gradient (another summation order in float32);
//   - after a second micro-batch, every small parameter's gradient is
//     FromFloat32(first + the float32 path's gradient of the second alone),
//     bit for bit: one rounding per micro-batch; and every linear weight's
//     within 2^-7 in relative L2 norm of the same (two bfloat16 roundings
//     of at most 2^-9 each, relative);
//   - ready is called once for every parameter, and ZeroGrads clears the
//     views it was given;
//   - the model's memory is as predicted (the float32 sums in Scratch),
//     and the device allocator counted the same.
func TestGPUBF16Grads(t *testing.T) {
	for _, c := range []struct {
		recipe int // in recipes
		head   HeadPrecision
	}{{0, HeadFP32}, {0, HeadBF16}, {2, HeadFP32}} {
		t.Run(recipes[c.recipe].name+"/"+c.head.String(), func(t *testing.T) { bf16Grads(t, recipes[c.recipe].r, c.head) })
	}
}

// bf16Grads is TestGPUBF16Grads for weights of recipe rc and head
// precision head.
func bf16Grads(t *testing.T, rc fp8.Recipe, head HeadPrecision) {
	const batch, seq = 2, 32
	r := newRig(t, testShape, 1e-3, rc)
	fp := r.model(t, testShape, batch, seq, Options{Head: head})
	bm := r.model(t, testShape, batch, seq, Options{Head: head, GradType: buffer.BFloat16})
	grads, read := bf16Views(t, r, testShape)
	n, v := batch*seq, testShape.Vocab
	mbs := [2][2][]int32{{randomTokens(n, v/2, 1), randomTokens(n, v, 2)}, {randomTokens(n, v, 3), randomTokens(n, v, 4)}}
	// pass runs micro-batch mb on m, accumulated into g, and returns the
	// names handed to ready.
	pass := func(m *Model, g Grads, mb int, zero bool) []string {
		t.Helper()
		var ready []string
		if zero {
			if err := m.ZeroGrads(g); err != nil {
				t.Fatal(err)
			}
		}
		if err := m.Forward(r.o.Param, mbs[mb][0], mbs[mb][1], 1); err != nil {
			t.Fatal(err)
		}
		if err := m.Backward(r.o.Param, g, func(name string) error { ready = append(ready, name); return nil }); err != nil {
			t.Fatal(err)
		}
		return ready
	}
	var names []string
	for _, p := range testShape.Params() {
		names = append(names, p.Name)
	}
	prev := map[string][]uint16{}
	for mb := range 2 {
		pass(fp, r.o.Grad, mb, true) // the float32 gradient of micro-batch mb alone
		want := r.grads(t, testShape)
		ready := pass(bm, grads, mb, mb == 0)
		slices.Sort(ready)
		if !slices.Equal(ready, slices.Sorted(slices.Values(names))) {
			t.Errorf("micro-batch %d: ready called for %v, want every parameter once", mb, ready)
		}
		for _, p := range testShape.Params() {
			got, f32 := read(p.Name), cuda.View[float32](want[p.Name])
			exp := make([]uint16, len(f32))
			for i, x := range f32 {
				if mb > 0 {
					x += bf16.ToFloat32(prev[p.Name][i])
				}
				exp[i] = bf16.FromFloat32(x)
			}
			prev[p.Name] = got
			checkBF16Grad(t, fmt.Sprintf("micro-batch %d: %s", mb, p.Name), got, exp, !p.HighPrecision, mb)
		}
	}
	rep, err := bm.Memory()
	if err != nil {
		t.Fatal(err)
	}
	if a := rep.Allocated; rep.Predicted != a || rep.Device != a.Layers*a.PerLayer()+a.Final+a.Scratch {
		t.Errorf("predicted %+v\nallocated %+v, device count %d", rep.Predicted, a, rep.Device)
	}
}

// checkBF16Grad compares a bfloat16 gradient with the expected bits:
// equal for small parameters; for linear weights after the first
// micro-batch within one step (or 2^-14 of the largest value), after the
// second within 2^-7 in relative L2 norm.
func checkBF16Grad(t *testing.T, name string, got, want []uint16, linear bool, mb int) {
	t.Helper()
	var num, den, big float64
	for _, w := range want {
		big = max(big, math.Abs(float64(bf16.ToFloat32(w))))
	}
	worst, same, far := 0, 0, 0
	for i := range got {
		d := bf16Key(got[i]) - bf16Key(want[i])
		worst = max(worst, d, -d)
		if got[i] == want[i] {
			same++
		}
		e := float64(bf16.ToFloat32(got[i])) - float64(bf16.ToFloat32(want[i]))
		if (d > 1 || d < -1) && !(math.Abs(e) <= 0x1p-14*big) {
			far++
		}
		num += e * e
		den += float64(bf16.ToFloat32(want[i])) * float64(bf16.ToFloat32(want[i]))
	}
	rel := math.Sqrt(num / den)
	switch {
	case den == 0:
		t.Errorf("%s: an expected gradient of zeros: the check cannot fail", name)
	case !linear && worst > 0:
		t.Errorf("%s: %d of %d values differ from bf16 of the float32 path's (worst by %d steps)", name, len(got)-same, len(got), worst)
	case linear && mb == 0 && far > 0:
		t.Errorf("%s: %d values more than one bfloat16 step from bf16 of the float32 path's (worst %d steps)", name, far, worst)
	case linear && !(rel <= 0x1p-7):
		t.Errorf("%s: relative L2 error %.3g", name, rel)
	}
	if linear {
		t.Logf("%s: %d of %d the same, worst %d steps, relative L2 %.3g", name, same, len(got), worst, rel)
	}
}

// TestPredictMemoryGradType checks the scratch of bfloat16 gradient views:
// PredictMemory with Options.GradType BFloat16 predicts 4 bytes more
// scratch per element of every bias, LayerNorm and embedding (counted
// here from the shapes), and nothing else; float32 (or zero) nothing;
// other types are refused.
func TestPredictMemoryGradType(t *testing.T) {
	for _, cfg := range []model.Config{testShape, {Layers: 3, Hidden: 256, Heads: 4, FFN: 640, Vocab: 300, Seq: 64}} {
		h, f := cfg.Hidden, cfg.FFN
		small := cfg.Vocab*h + cfg.Seq*h + cfg.Layers*(2*h+3*h+h+2*h+f+h) + 2*h
		o := Options{Recipe: recipes[0].r}
		base, err := PredictMemory(cfg, 2, 32, o)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range []buffer.DType{buffer.Float32, buffer.BFloat16} {
			o.GradType = g
			m, err := PredictMemory(cfg, 2, 32, o)
			if err != nil {
				t.Fatal(err)
			}
			want := base
			if g == buffer.BFloat16 {
				want.Scratch += 4 * small
			}
			if m != want {
				t.Errorf("%v gradients: %+v, want %+v", g, m, want)
			}
		}
		o.GradType = buffer.Uint8
		if _, err := PredictMemory(cfg, 2, 32, o); err == nil {
			t.Error("uint8 gradients: no error")
		}
	}
}
