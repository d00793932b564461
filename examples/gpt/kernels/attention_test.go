package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/distopt/distopt/bf16"
	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/cuda/cudatest"
)

// TestAttentionKernelsDefined checks that every kernel the attention
// launchers name is in the attention module of every variant (CPU only).
func TestAttentionKernelsDefined(t *testing.T) { checkDefined(t, "attention", attentionKernels()) }

// refCausalSoftmax is model.CausalSoftmax (examples/gpt/model), restated in
// float64 so that this package's tests need no example package.
func refCausalSoftmax(s []float64, n, t int, scale float64) []float64 {
	p := make([]float64, n*t*t)
	for r := range n * t {
		i := r % t
		mx := math.Inf(-1)
		for j := 0; j <= i; j++ {
			mx = max(mx, scale*s[r*t+j])
		}
		sum := 0.0
		for j := 0; j <= i; j++ {
			p[r*t+j] = math.Exp(scale*s[r*t+j] - mx)
			sum += p[r*t+j]
		}
		for j := 0; j <= i; j++ {
			p[r*t+j] /= sum
		}
	}
	return p
}

// refCausalSoftmaxGrad is model.CausalSoftmaxBackward in float64.
func refCausalSoftmaxGrad(p, dp []float64, n, t int, scale float64) []float64 {
	ds := make([]float64, n*t*t)
	for r := range n * t {
		i := r % t
		dot := 0.0
		for j := 0; j <= i; j++ {
			dot += p[r*t+j] * dp[r*t+j]
		}
		for j := 0; j <= i; j++ {
			ds[r*t+j] = scale * p[r*t+j] * (dp[r*t+j] - dot)
		}
	}
	return ds
}

// causalInput returns n·t·t float32 values of standard deviation std below
// and on the diagonal and NaN above it (which the kernels must not read),
// with their float64 twins (0 above the diagonal).
func causalInput(r *rand.Rand, n, t int, std float64) ([]float32, []float64) {
	v, ref := make([]float32, n*t*t), make([]float64, n*t*t)
	for e := range v {
		if e%t > (e/t)%t {
			v[e] = float32(math.NaN())
			continue
		}
		v[e] = float32(std * r.NormFloat64())
		ref[e] = float64(v[e])
	}
	return v, ref
}

// compareRows checks got against want element by element: |got - want| <=
// 1e-6·scale + rtol·|want|, scale the largest |want| of the tensor; above
// the diagonal got must be exactly +0.
func compareRows(t *testing.T, name string, got []float32, want []float64, tt int, rtol float64) {
	t.Helper()
	scale := 0.0
	for _, w := range want {
		scale = max(scale, math.Abs(w))
	}
	for e, w := range want {
		if e%tt > (e/tt)%tt {
			if math.Float32bits(got[e]) != 0 {
				t.Fatalf("%s[%d] above the diagonal = %v, want 0", name, e, got[e])
			}
			continue
		}
		if d := math.Abs(float64(got[e]) - w); !(d <= 1e-6*scale+rtol*math.Abs(w)) {
			t.Fatalf("%s[%d] = %v, reference %v (difference %.3g, scale %.3g)", name, e, got[e], w, d, scale)
		}
	}
}

// TestAttentionSoftmax runs AttentionSoftmax and AttentionSoftmaxGrad on
// scores whose upper triangle is NaN, for t not a multiple of 4 (scalar
// kernels), multiples of 4 (float4 kernels, rows both inside and beyond
// the register cache), and t a multiple of 4 at a pointer that is only
// 4-byte aligned (scalar kernels again), in place and out of place,
// against the float64 reference: p to 2e-5 relative (float32 rounding and
// __expf), ds to 1e-4 relative plus 1e-6 of the largest |ds| (dp - Σp·dp
// cancels). Zeros above the diagonal must be written. A second run must
// give the same bits (fixed reduction order).
func TestAttentionSoftmax(t *testing.T) {
	d, sets := loadAll(t)
	s := cudatest.Stream(t, d)
	r := rand.New(rand.NewPCG(11, 12))
	cases := []struct {
		n, t    int
		offset  int // bytes added to every pointer
		inPlace bool
	}{
		{3, 1, 0, false}, {4, 37, 0, true}, {2, 100, 0, false}, {2, 64, 4, true},
		{1, 1024, 0, true}, {1, 2052, 0, false}, {1, 2560, 0, false},
	}
	for _, k := range sets {
		for _, c := range cases {
			t.Run(fmt.Sprintf("%v/n=%d,t=%d,offset=%d,inplace=%t", k.lib.Variant(), c.n, c.t, c.offset, c.inPlace), func(t *testing.T) {
				checkAttentionSoftmax(t, k, s, r, c.n, c.t, c.offset, c.inPlace)
			})
		}
	}
}

func checkAttentionSoftmax(t *testing.T, k *Set, s *cuda.Stream, r *rand.Rand, n, tt, offset int, inPlace bool) {
	d := k.Device()
	size := 4*n*tt*tt + 16
	upload := func(v []float32) cuda.DevicePtr {
		p := cudatest.Alloc(t, d, size).Add(offset)
		must(t, s.Upload(p, cuda.Bytes(v)))
		return p
	}
	download := func(p cuda.DevicePtr) []float32 {
		v := make([]float32, n*tt*tt)
		must(t, s.Download(cuda.Bytes(v), p))
		return v
	}
	const scale = 0.125
	scores, sRef := causalInput(r, n, tt, 8)
	sp := upload(scores)
	p := sp
	if !inPlace {
		p = cudatest.Alloc(t, d, size).Add(offset)
	}
	must(t, k.AttentionSoftmax(s, p, sp, n, tt, scale))
	pGot := download(p)
	pRef := refCausalSoftmax(sRef, n, tt, scale)
	compareRows(t, "p", pGot, pRef, tt, 2e-5)

	dp, dpRef := causalInput(r, n, tt, 1)
	dpp := upload(dp)
	ds := dpp
	if !inPlace {
		ds = cudatest.Alloc(t, d, size).Add(offset)
	}
	must(t, k.AttentionSoftmaxGrad(s, ds, p, dpp, n, tt, scale))
	dsGot := download(ds)
	// The reference takes the GPU's p (float32), so that only this
	// kernel's rounding is measured.
	pf := make([]float64, len(pGot))
	for i, v := range pGot {
		pf[i] = float64(v)
	}
	compareRows(t, "ds", dsGot, refCausalSoftmaxGrad(pf, dpRef, n, tt, scale), tt, 1e-4)

	if inPlace {
		return
	}
	// Same bits again.
	must(t, k.AttentionSoftmax(s, p, sp, n, tt, scale))
	must(t, k.AttentionSoftmaxGrad(s, ds, p, dpp, n, tt, scale))
	again, dsAgain := download(p), download(ds)
	for i := range again {
		if math.Float32bits(again[i]) != math.Float32bits(pGot[i]) || math.Float32bits(dsAgain[i]) != math.Float32bits(dsGot[i]) {
			t.Fatalf("element %d differs between two runs: p %v then %v, ds %v then %v", i, pGot[i], again[i], dsGot[i], dsAgain[i])
		}
	}
}

// TestAttentionHeads splits the heads of a row-major activation into the
// packed [batch, heads, seq, d] layout and merges them back into another
// activation prefilled with a sentinel, against index loops on the host:
// the packed copy must equal the reference bit for bit, the merge must
// restore exactly the columns of the heads and leave every other column
// (and the guard words past the end) as it was. Cases cover the float4
// path (d, LD and Off multiples of 4) and the scalar one (d = 6, Off = 3),
// and a width of 3h with an offset (the key part of qkv).
func TestAttentionHeads(t *testing.T) {
	d, sets := loadAll(t)
	s := cudatest.Stream(t, d)
	r := rand.New(rand.NewPCG(13, 14))
	layouts := []HeadLayout{
		{Batch: 2, Seq: 5, Heads: 3, D: 8, LD: 3 * 24, Off: 24},
		{Batch: 1, Seq: 7, Heads: 2, D: 6, LD: 16, Off: 3},
		{Batch: 3, Seq: 33, Heads: 4, D: 64, LD: 256, Off: 0},
	}
	for _, k := range sets {
		for _, l := range layouts {
			t.Run(fmt.Sprintf("%v/%+v", k.lib.Variant(), l), func(t *testing.T) { checkHeads(t, k, s, r, l) })
		}
	}
}

func checkHeads(t *testing.T, k *Set, s *cuda.Stream, r *rand.Rand, l HeadLayout) {
	d := k.Device()
	rows, n := l.Batch*l.Seq, l.Batch*l.Seq*l.Heads*l.D
	const guard = 8
	src := make([]float32, rows*l.LD+guard)
	for i := range src {
		src[i] = float32(r.NormFloat64())
	}
	want := make([]float32, n)
	for b := range l.Batch {
		for h := range l.Heads {
			for tt := range l.Seq {
				for c := range l.D {
					want[((b*l.Heads+h)*l.Seq+tt)*l.D+c] = src[(b*l.Seq+tt)*l.LD+l.Off+h*l.D+c]
				}
			}
		}
	}
	ps := cudatest.Alloc(t, d, 4*len(src))
	pp := cudatest.Alloc(t, d, 4*(n+guard))
	pm := cudatest.Alloc(t, d, 4*len(src))
	must(t, s.Upload(ps, cuda.Bytes(src)))
	sentinel := make([]float32, n+guard)
	for i := range sentinel {
		sentinel[i] = -7
	}
	must(t, s.Upload(pp, cuda.Bytes(sentinel)))
	must(t, k.AttentionSplitHeads(s, pp, ps, l))
	packed := make([]float32, n+guard)
	must(t, s.Download(cuda.Bytes(packed), pp))
	for i, w := range want {
		if math.Float32bits(packed[i]) != math.Float32bits(w) {
			t.Fatalf("packed[%d] = %v, want %v", i, packed[i], w)
		}
	}
	for i := n; i < n+guard; i++ {
		if packed[i] != -7 {
			t.Fatalf("split wrote past the end: packed[%d] = %v", i, packed[i])
		}
	}
	fill := make([]float32, len(src))
	for i := range fill {
		fill[i] = -7
	}
	must(t, s.Upload(pm, cuda.Bytes(fill)))
	must(t, k.AttentionMergeHeads(s, pm, pp, l))
	merged := make([]float32, len(src))
	must(t, s.Download(cuda.Bytes(merged), pm))
	for i := range merged {
		col := i % l.LD
		inHeads := i < rows*l.LD && col >= l.Off && col < l.Off+l.Heads*l.D
		switch {
		case inHeads && math.Float32bits(merged[i]) != math.Float32bits(src[i]):
			t.Fatalf("merged[%d] = %v, want %v", i, merged[i], src[i])
		case !inHeads && merged[i] != -7:
			t.Fatalf("merge wrote outside the heads: merged[%d] (column %d) = %v", i, col, merged[i])
		}
	}
}

// TestAttentionSoftmaxBF16 checks the bfloat16 variants against the
// float32 kernels, which compute the same float32 values: the bfloat16
// probabilities must be exactly bf16.FromFloat32 of AttentionSoftmax's
// (round to nearest even), and the bfloat16 gradient exactly the rounding
// of AttentionSoftmaxGrad's run on the widened bfloat16 probabilities.
// Cases: vector kernels (t a multiple of 4, aligned), scalar kernels (t =
// 37, and t = 64 at 4-byte-aligned pointers), a row beyond the register
// cache (t = 2560).
func TestAttentionSoftmaxBF16(t *testing.T) {
	d, sets := loadAll(t)
	s := cudatest.Stream(t, d)
	r := rand.New(rand.NewPCG(15, 16))
	cases := []struct{ n, t, offset int }{{3, 37, 0}, {2, 100, 0}, {2, 64, 4}, {1, 2560, 0}}
	for _, k := range sets {
		for _, c := range cases {
			t.Run(fmt.Sprintf("%v/n=%d,t=%d,offset=%d", k.lib.Variant(), c.n, c.t, c.offset), func(t *testing.T) {
				checkSoftmaxBF16(t, k, s, r, c.n, c.t, c.offset)
			})
		}
	}
}

func checkSoftmaxBF16(t *testing.T, k *Set, s *cuda.Stream, r *rand.Rand, n, tt, offset int) {
	d := k.Device()
	elems := n * tt * tt
	alloc := func() cuda.DevicePtr { return cudatest.Alloc(t, d, 4*elems+16).Add(offset) }
	const scale = 0.125
	scores, _ := causalInput(r, n, tt, 8)
	sp, p32, p16 := alloc(), alloc(), alloc()
	must(t, s.Upload(sp, cuda.Bytes(scores)))
	must(t, k.AttentionSoftmax(s, p32, sp, n, tt, scale))
	must(t, k.AttentionSoftmaxBF16(s, p16, sp, n, tt, scale))
	f32 := make([]float32, elems)
	b16 := make([]uint16, elems)
	must(t, s.Download(cuda.Bytes(f32), p32))
	must(t, s.Download(cuda.Bytes(b16), p16))
	for i := range f32 {
		if want := bf16.FromFloat32(f32[i]); b16[i] != want {
			t.Fatalf("p[%d] = %#04x, want %#04x (bfloat16 of %v)", i, b16[i], want, f32[i])
		}
	}
	// The gradient from the bfloat16 probabilities, widened for the
	// float32 kernel.
	for i, v := range b16 {
		f32[i] = bf16.ToFloat32(v)
	}
	pw := alloc()
	must(t, s.Upload(pw, cuda.Bytes(f32)))
	dp, _ := causalInput(r, n, tt, 1)
	dpp, ds32, ds16 := alloc(), alloc(), alloc()
	must(t, s.Upload(dpp, cuda.Bytes(dp)))
	must(t, k.AttentionSoftmaxGrad(s, ds32, pw, dpp, n, tt, scale))
	must(t, k.AttentionSoftmaxGradBF16(s, ds16, p16, dpp, n, tt, scale))
	must(t, s.Download(cuda.Bytes(f32), ds32))
	must(t, s.Download(cuda.Bytes(b16), ds16))
	for i := range f32 {
		if want := bf16.FromFloat32(f32[i]); b16[i] != want {
			t.Fatalf("ds[%d] = %#04x, want %#04x (bfloat16 of %v)", i, b16[i], want, f32[i])
		}
	}
}

// TestAttentionSplitHeadsBF16 checks that the bfloat16 split is exactly
// the rounding of the float32 split, in the vector and scalar paths.
func TestAttentionSplitHeadsBF16(t *testing.T) {
	d, sets := loadAll(t)
	s := cudatest.Stream(t, d)
	r := rand.New(rand.NewPCG(17, 18))
	for _, k := range sets {
		for _, l := range []HeadLayout{
			{Batch: 2, Seq: 5, Heads: 3, D: 8, LD: 72, Off: 24},
			{Batch: 1, Seq: 7, Heads: 2, D: 6, LD: 16, Off: 3},
		} {
			rows, n := l.Batch*l.Seq, l.Batch*l.Seq*l.Heads*l.D
			src := make([]float32, rows*l.LD)
			for i := range src {
				src[i] = float32(r.NormFloat64())
			}
			ps, p32, p16 := cudatest.Alloc(t, d, 4*len(src)), cudatest.Alloc(t, d, 4*n), cudatest.Alloc(t, d, 2*n)
			must(t, s.Upload(ps, cuda.Bytes(src)))
			must(t, k.AttentionSplitHeads(s, p32, ps, l))
			must(t, k.AttentionSplitHeadsBF16(s, p16, ps, l))
			f32, b16 := make([]float32, n), make([]uint16, n)
			must(t, s.Download(cuda.Bytes(f32), p32))
			must(t, s.Download(cuda.Bytes(b16), p16))
			for i := range f32 {
				if want := bf16.FromFloat32(f32[i]); b16[i] != want {
					t.Fatalf("%v %+v: element %d = %#04x, want %#04x", k.lib.Variant(), l, i, b16[i], want)
				}
			}
		}
	}
}
