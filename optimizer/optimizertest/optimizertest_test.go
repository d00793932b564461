package optimizertest

import (
	"math"
	"strings"
	"testing"

	"github.com/distopt/distopt/bf16"
	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
)

// wholeAndSplit returns a reference holding parameter "w" of 10 elements in
// one piece, and a result holding it in two pieces (offsets 0 and 6) with
// the same values, both with one FP8 tensor and one high-precision weight.
func wholeAndSplit(withV bool) (want, got Result) {
	seq := func(lo, hi int, k float32) []float32 {
		x := make([]float32, 0, hi-lo)
		for i := lo; i < hi; i++ {
			x = append(x, k*float32(i+1))
		}
		return x
	}
	piece := func(lo, hi int) optimizer.PieceState {
		ps := optimizer.PieceState{Param: "w", Offset: lo, Master: seq(lo, hi, 1), M: seq(lo, hi, 0.5)}
		if withV {
			ps.V = seq(lo, hi, 0.25)
		}
		return ps
	}
	tensor := func() *fp8.Tensor {
		return &fp8.Tensor{Data: []byte{1, 2, 3}, Shape: []int{3}, Format: fp8.E4M3, ScaleInv: []float32{0.5}}
	}
	want = Result{Pieces: []optimizer.PieceState{piece(0, 10)}, Tensors: map[string]*fp8.Tensor{"t": tensor()}, Weights: map[string][]float32{"b": {1, 2}}}
	got = Result{Pieces: []optimizer.PieceState{piece(0, 6), piece(6, 10)}, Tensors: map[string]*fp8.Tensor{"t": tensor()}, Weights: map[string][]float32{"b": {1, 2}}}
	return want, got
}

// TestDiff changes one thing at a time in a result equal to its reference
// and checks that Diff reports that thing, and only that.
func TestDiff(t *testing.T) {
	cases := []struct {
		name   string
		noV    bool
		change func(r *Result)
		want   string // the first difference, "" for none
		more   int    // how many more differences
	}{
		{"equal", false, func(*Result) {}, "", 0},
		{"equal without v", true, func(*Result) {}, "", 0},
		{"master", false, func(r *Result) { r.Pieces[1].Master[2] = math.Nextafter32(r.Pieces[1].Master[2], 0) }, "master of w differs at 8", 0},
		{"moment m sign of zero", false, func(r *Result) { r.Pieces[0].M[0], r.Pieces[0].M[1] = 0, float32(math.Copysign(0, -1)) }, "moment m of w differs at 0", 0},
		{"moment v", false, func(r *Result) { r.Pieces[1].V[0] = 7 }, "moment v of w differs at 6", 0},
		{"moment v not in the reference", true, func(r *Result) { r.Pieces[1].V = []float32{0, 0, 0, 0} }, "moment v of w at 6, absent from the reference", 0},
		{"short piece", false, func(r *Result) { r.Pieces[0].M = r.Pieces[0].M[:5] }, "moment m of w differs at 0", 0},
		{"piece past the end", false, func(r *Result) { r.Pieces[1].Offset = 7 }, "master of w at 7: 4 elements past the reference's 10", 2},
		{"unknown piece", false, func(r *Result) { r.Pieces[1].Param = "x" }, "piece of x at 6 is not in the reference", 0},
		{"FP8 byte", false, func(r *Result) { r.Tensors["t"].Data[2] ^= 1 }, "FP8 bytes or scales of t differ", 0},
		{"FP8 scale", false, func(r *Result) { r.Tensors["t"].ScaleInv[0] = 0.25 }, "FP8 bytes or scales of t differ", 0},
		{"FP8 recipe", false, func(r *Result) { r.Tensors["t"].Recipe.Margin = 1 }, "FP8 bytes or scales of t differ", 0},
		{"FP8 tensor missing", false, func(r *Result) { delete(r.Tensors, "t") }, "FP8 bytes or scales of t differ", 0},
		{"weight NaN payload", false, func(r *Result) {
			r.Weights["b"][1] = math.Float32frombits(0x7fc00001)
		}, "gathered b differs at 1", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want, got := wholeAndSplit(!c.noV)
			c.change(&got)
			diffs := Diff(want, got)
			switch {
			case c.want == "" && diffs != nil:
				t.Fatalf("Diff = %q, want none", diffs)
			case c.want != "" && (len(diffs) != 1+c.more || !strings.HasPrefix(diffs[0], c.want)):
				t.Fatalf("Diff = %q, want %d, the first starting %q", diffs, 1+c.more, c.want)
			}
		})
	}
}

// TestMean checks Mean and Round against averages worked out by hand.
func TestMean(t *testing.T) {
	const tie = 1 + 1.0/256 // halfway between two BFloat16 values: rounds to even, 1
	cases := []struct {
		name  string
		dt    buffer.DType
		grads [][]float32
		want  []float32
	}{
		{"float32", buffer.Float32, [][]float32{{1, 2, -3}, {3, 5, 3}}, []float32{2, 3.5, 0}},
		{"float32 three", buffer.Float32, [][]float32{{1}, {2}, {6}}, []float32{3}},
		{"bfloat16 rounds each input", buffer.BFloat16, [][]float32{{tie, 3}, {tie, 3 + 1.0/128}}, []float32{1, 3}},
		{"bfloat16 one", buffer.BFloat16, [][]float32{{0.1}}, []float32{bf16.ToFloat32(bf16.FromFloat32(0.1))}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Mean(c.dt, c.grads...); FirstDiff(got, c.want) >= 0 {
				t.Fatalf("Mean = %v, want %v", got, c.want)
			}
		})
	}
	if got := Round([]float32{tie, 0.1}, buffer.Float32); FirstDiff(got, []float32{tie, 0.1}) >= 0 {
		t.Fatalf("Round to float32 changed %v", got)
	}
}

// TestGrad checks that gradients are exact in BFloat16, deterministic,
// differ between ranks, and carry the outlier at steps 2, 5, ...
func TestGrad(t *testing.T) {
	p := AwkwardParams()[0]
	for step := range 6 {
		g := RankGrad(p, step, 1)
		if FirstDiff(g, Round(g, buffer.BFloat16)) >= 0 {
			t.Fatalf("step %d: not exact in BFloat16", step)
		}
		if FirstDiff(g, RankGrad(p, step, 1)) >= 0 || FirstDiff(g, RankGrad(p, step, 0)) < 0 {
			t.Fatalf("step %d: not deterministic, or the same on ranks 0 and 1", step)
		}
		big := math.Abs(float64(g[0])) > 0.25
		for _, x := range g[1:] {
			if math.Abs(float64(x)) > 0.25 {
				t.Fatalf("step %d: %g outside element 0", step, x)
			}
		}
		if big != (step%3 == 2) && g[0] != 0 {
			t.Fatalf("step %d: element 0 is %g", step, g[0])
		}
	}
}
