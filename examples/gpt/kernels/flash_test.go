package kernels

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/distopt/distopt/bf16"
	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/cuda/cudatest"
)

// TestFlashKernelsDefined checks, in every variant (CPU only), that the
// flash module defines exactly the kernels the launchers use by default
// (flashDefault, and the backward's preparation), which the driver's JIT
// compiles on a fresh machine, and that flashalt defines every other
// kernel the launchers can name.
func TestFlashKernelsDefined(t *testing.T) {
	defaults := []string{kernelFlashPrep}
	for _, p := range []flashPass{flashFwd, flashDKDV, flashDQ} {
		for _, d := range []int{64, 128} {
			tile, ok := flashTileOf(p, d, flashDefault(p, d))
			if !ok {
				t.Fatalf("no default kernel of %v at D = %d", p, d)
			}
			defaults = append(defaults, tile.name)
		}
	}
	var others []string
	for _, n := range flashKernels() {
		if !slices.Contains(defaults, n) {
			others = append(others, n)
		}
	}
	checkDefined(t, "flash", defaults)
	checkDefined(t, "flashalt", others)
	for _, v := range cuda.Variants() {
		ptx, err := cuda.LibraryPTX(ptxFiles, "flash", v)
		if err != nil {
			t.Fatal(err)
		}
		if got := cuda.KernelNames(ptx); len(got) != len(defaults) {
			t.Errorf("flash_%v defines %v; want only the defaults %v (the others belong in flashalt.cu)", v, got, defaults)
		}
	}
}

// TestFlashBadInput checks that the launchers refuse, before touching the
// device, shapes and layouts the kernels cannot take (CPU only: a nil Set),
// among them more than 65535 tiles of a head for the pipe and wide
// kernels, whose grid has the tiles in y, and flashDS for one backward
// kernel only, or without (aligned) dS scratch, or dS scratch for another
// variant (FlashBackward with a misaligned FlashScratch.DS).
func TestFlashBadInput(t *testing.T) {
	good := FlashShape{Batch: 1, Heads: 2, Seq: 10, D: 64}
	rows := FlashRows{Ptr: 256, LD: 128}
	cases := []struct {
		name string
		sh   FlashShape
		o    FlashRows
		q    cuda.DevicePtr
	}{
		{"D 32", FlashShape{1, 2, 10, 32}, rows, 256},
		{"D 96", FlashShape{1, 1, 10, 96}, FlashRows{256, 96}, 256},
		{"seq 0", FlashShape{1, 2, 0, 64}, rows, 256},
		{"LD below heads·D", good, FlashRows{256, 100}, 256},
		{"odd LD", good, FlashRows{256, 129}, 256},
		{"rows misaligned", good, FlashRows{260, 128}, 256},
		{"packed misaligned", good, rows, 264},
	}
	var k *Set
	for _, c := range cases {
		err := k.FlashForward(nil, c.o, 0, 512, c.q, 256, 256, c.sh, 0.125)
		if !errors.Is(err, ErrFlashShape) {
			t.Errorf("FlashForward %s: %v, want ErrFlashShape", c.name, err)
		}
		g := FlashGrads{DQ: c.o, DK: rows, DV: rows}
		err = k.FlashBackward(nil, g, FlashScratch{DO16: 256, DSum: 512}, rows, c.q, 256, 256, 256, 512, c.sh, 0.125)
		if !errors.Is(err, ErrFlashShape) {
			t.Errorf("FlashBackward %s: %v, want ErrFlashShape", c.name, err)
		}
	}
	long := FlashShape{Batch: 1, Heads: 1, Seq: 65535*128 + 1, D: 64} // 65536 tiles of 128 rows
	for _, v := range []flashVariant{flashPipe, flashWide} {
		if err := k.flashForward(nil, FlashRows{256, 64}, 0, 512, 256, 256, 256, long, 0.125, v); !errors.Is(err, ErrFlashShape) {
			t.Errorf("%v forward at seq %d: %v, want ErrFlashShape", v, long.Seq, err)
		}
	}
	gr := FlashGrads{DQ: rows, DK: rows, DV: rows}
	for _, c := range []struct {
		kv, qv flashVariant
		ds     cuda.DevicePtr
	}{{flashDS, flashLdmatrix, 4096}, {flashPipe, flashDS, 4096}, {flashDS, flashDS, 0}, {flashDS, flashDS, 4100}, {flashPipe, flashPipe, 4096}} {
		err := k.flashBackward(nil, gr, FlashScratch{DO16: 256, DSum: 512}, rows, 256, 256, 256, 256, 512, good, 1, c.kv, c.qv, c.ds)
		if err == nil || errors.Is(err, ErrFlashShape) {
			t.Errorf("backward with dK/dV %v, dQ %v, dS scratch %#x: %v, want the dS error", c.kv, c.qv, uint64(c.ds), err)
		}
	}
	if err := k.FlashBackward(nil, gr, FlashScratch{DO16: 256, DSum: 512, DS: 4100}, rows, 256, 256, 256, 256, 512, good, 1); err == nil {
		t.Errorf("FlashBackward with misaligned dS scratch: no error")
	}
	g := FlashGrads{DQ: rows, DK: rows, DV: FlashRows{256, 130}}
	if err := k.FlashBackward(nil, g, FlashScratch{DO16: 256, DSum: 512}, rows, 256, 256, 256, 256, 512, good, 1); !errors.Is(err, ErrFlashShape) {
		t.Errorf("FlashBackward with dk, dv of different LD: %v, want ErrFlashShape", err)
	}
}

// flashGuard is the bit pattern of the guard columns beside every float32
// rows tensor of the GPU tests (a NaN no kernel writes). The outputs are
// rows of LD = heads·D + 8 (o) and 3·heads·D + 8 (dq, dk, dv side by
// side, like the model's dqkv), so 8 guard columns end every row.
const flashGuard = 0x7fc0f1a5

func bf16Bytes(x []float64) []byte {
	u := make([]uint16, len(x))
	for i, v := range x {
		u[i] = bf16.FromFloat32(float32(v))
	}
	return cuda.Bytes(u)
}

// rowsOf lays packed [batch·heads, seq, D] values out as rows of ld
// float32 (head k of token (b, t) at (b·seq + t)·ld + off + k·D), the rest
// guard bits.
func rowsOf(x []float64, sh FlashShape, ld, off int) []float32 {
	out := make([]float32, sh.Batch*sh.Seq*ld)
	for i := range out {
		out[i] = math.Float32frombits(flashGuard)
	}
	for bh := range sh.Batch * sh.Heads {
		b, k := bh/sh.Heads, bh%sh.Heads
		for t := range sh.Seq {
			for c := range sh.D {
				out[(b*sh.Seq+t)*ld+off+k*sh.D+c] = float32(x[(bh*sh.Seq+t)*sh.D+c])
			}
		}
	}
	return out
}

// packedOf is the inverse of rowsOf, in float64.
func packedOf(y []float32, sh FlashShape, ld, off int) []float64 {
	x := make([]float64, sh.Rows()*sh.D)
	for bh := range sh.Batch * sh.Heads {
		b, k := bh/sh.Heads, bh%sh.Heads
		for t := range sh.Seq {
			for c := range sh.D {
				x[(bh*sh.Seq+t)*sh.D+c] = float64(y[(b*sh.Seq+t)*ld+off+k*sh.D+c])
			}
		}
	}
	return x
}

// guardsIntact checks that rows y of ld left every column outside the
// heads at offsets offs untouched.
func guardsIntact(t *testing.T, name string, y []float32, sh FlashShape, ld int, offs ...int) {
	t.Helper()
	for i, v := range y {
		col := i % ld
		inside := false
		for _, off := range offs {
			inside = inside || (col >= off && col < off+sh.Heads*sh.D)
		}
		if !inside && math.Float32bits(v) != flashGuard {
			t.Fatalf("%s: guard column %d of row %d written (%#x)", name, col, i/ld, math.Float32bits(v))
		}
	}
}

// flashConfig is the variant of each tile kernel in one run.
type flashConfig struct {
	fwd, kv, qv flashVariant
}

func (c flashConfig) String() string { return fmt.Sprintf("fwd %v, dkdv %v, dq %v", c.fwd, c.kv, c.qv) }

// flashConfigs returns, for head width d, one configuration per variant
// (each kernel in that variant where it exists, else in flashLdmatrix),
// the launchers' defaults before flashDS, the one variant that is never
// a default.
func flashConfigs(d int) []flashConfig {
	pick := func(p flashPass, v flashVariant) flashVariant {
		if _, ok := flashTileOf(p, d, v); ok {
			return v
		}
		return flashLdmatrix
	}
	var cs []flashConfig
	for _, v := range flashVariants {
		if v != flashDS {
			cs = append(cs, flashConfig{pick(flashFwd, v), pick(flashDKDV, v), pick(flashDQ, v)})
		}
	}
	cs = append(cs, flashConfig{flashDefault(flashFwd, d), flashDefault(flashDKDV, d), flashDefault(flashDQ, d)})
	return append(cs, flashConfig{pick(flashFwd, flashDS), flashDS, flashDS})
}

// runFlash uploads in, runs the forward and backward kernels of
// configuration cfg on k, and returns the outputs in the packed float64
// layout, the raw bits of every output (for the repeat test) and o16.
func runFlash(t *testing.T, k *Set, s *cuda.Stream, in *flashIn, cfg flashConfig) (flashOut, [][]float32, []uint16) {
	sh, d := in.sh, k.Device()
	hd := sh.Heads * sh.D
	ldo, ldg := hd+8, 3*hd+8
	upload := func(b []byte) cuda.DevicePtr {
		p := cudatest.Alloc(t, d, len(b))
		must(t, s.Upload(p, b))
		return p
	}
	q, kk, v := upload(bf16Bytes(in.q)), upload(bf16Bytes(in.k)), upload(bf16Bytes(in.v))
	o, dqkv := cudatest.Alloc(t, d, 4*sh.Batch*sh.Seq*ldo), cudatest.Alloc(t, d, 4*sh.Batch*sh.Seq*ldg)
	must(t, s.Memset32(o, flashGuard, sh.Batch*sh.Seq*ldo))
	must(t, s.Memset32(dqkv, flashGuard, sh.Batch*sh.Seq*ldg))
	dO := upload(cuda.Bytes(rowsOf(in.dO, sh, ldo, 0)))
	o16, lse := cudatest.Alloc(t, d, 2*sh.Rows()*sh.D), cudatest.Alloc(t, d, 4*sh.Rows())
	n16, nsum := FlashScratchBytes(sh)
	scr := FlashScratch{DO16: cudatest.Alloc(t, d, n16), DSum: cudatest.Alloc(t, d, nsum)}
	scale := float32(in.scale)
	must(t, k.flashForward(s, FlashRows{o, ldo}, o16, lse, q, kk, v, sh, scale, cfg.fwd))
	g := FlashGrads{DQ: FlashRows{dqkv, ldg}, DK: FlashRows{dqkv.Add(4 * hd), ldg}, DV: FlashRows{dqkv.Add(8 * hd), ldg}}
	var ds cuda.DevicePtr
	if cfg.kv == flashDS { // NaN bits, so that an element left unwritten shows in dq
		n := FlashDSBytes(sh)
		ds = cudatest.Alloc(t, d, n)
		must(t, s.Memset32(ds, 0x7fc17fc1, n/4))
	}
	must(t, k.flashBackward(s, g, scr, FlashRows{dO, ldo}, q, kk, v, o16, lse, sh, scale, cfg.kv, cfg.qv, ds))
	yo, yg := make([]float32, sh.Batch*sh.Seq*ldo), make([]float32, sh.Batch*sh.Seq*ldg)
	ylse, y16 := make([]float32, sh.Rows()), make([]uint16, sh.Rows()*sh.D)
	must(t, s.Download(cuda.Bytes(yo), o))
	must(t, s.Download(cuda.Bytes(yg), dqkv))
	must(t, s.Download(cuda.Bytes(ylse), lse))
	must(t, s.Download(cuda.Bytes(y16), o16))
	must(t, s.Synchronize())
	guardsIntact(t, "o", yo, sh, ldo, 0)
	guardsIntact(t, "dqkv", yg, sh, ldg, 0, hd, 2*hd)
	lse64 := make([]float64, len(ylse))
	for i, x := range ylse {
		lse64[i] = float64(x)
	}
	out := flashOut{o: packedOf(yo, sh, ldo, 0), lse: lse64, dq: packedOf(yg, sh, ldg, 0),
		dk: packedOf(yg, sh, ldg, hd), dv: packedOf(yg, sh, ldg, 2*hd)}
	return out, [][]float32{yo, yg, ylse}, y16
}

// sameBits returns "" when a and b (outputs of runFlash) hold the same
// bits, else where they first differ.
func sameBits(a, b [][]float32) string {
	for i := range a {
		for j := range a[i] {
			if math.Float32bits(a[i][j]) != math.Float32bits(b[i][j]) {
				return fmt.Sprintf("output %d element %d: %v and %v", i, j, a[i][j], b[i][j])
			}
		}
	}
	return ""
}

// TestFlashAttention runs FlashForward and FlashBackward at flashCases
// (seq 1, below, at and beyond one 64-row tile, ragged last tiles, D 64
// and 128, several batch elements and heads) on bfloat16 inputs against
// refFlash, the float64 definition on the same bfloat16 values, in every
// configuration of flashConfigs (each variant of the tile kernels, and the
// launchers' defaults): every output within flashTol of its largest value
// (the bfloat16 rounding of p, ds and the kept output, which
// TestFlashRounding bounds with the tile model, plus float32 sums), o16 o
// rounded to bfloat16, the guard columns around every output untouched,
// and a second run of the same configuration equal to the bit (fixed
// summation order, no atomics). The subtest "same-bits" then demands that
// every configuration gave the bits of the first (flashLdmatrix): the
// variants compute the same products in the same order.
func TestFlashAttention(t *testing.T) {
	_, sets := loadAll(t)
	r := rand.New(rand.NewPCG(21, 22))
	ins := make([]*flashIn, len(flashCases))
	wants := make([]map[string][]float64, len(flashCases))
	for i, sh := range flashCases {
		ins[i] = newFlashIn(r, sh, 1.5)
		wants[i] = refFlash(ins[i]).named()
	}
	for _, k := range sets {
		s := cudatest.Stream(t, k.Device())
		// bits[i][j]: shape i, configuration j; the configurations run in
		// the outer loop, so that a kernel fault ends the run of its own
		// configuration and those after it only.
		bits := make([][][][]float32, len(flashCases))
		for j := range flashConfigs(64) {
			for i, sh := range flashCases {
				cfg := flashConfigs(sh.D)[j]
				t.Run(fmt.Sprintf("%v/%v/%+v", k.lib.Variant(), cfg, sh), func(t *testing.T) {
					got, b, o16 := runFlash(t, k, s, ins[i], cfg)
					bits[i] = append(bits[i], b)
					gotN := got.named()
					for name, w := range wants[i] {
						e := relErr(gotN[name], w)
						t.Logf("%s: %.3g of the largest value", name, e)
						if !(e <= flashTol[name]) {
							t.Errorf("%s differs from the float64 reference by %.3g of its largest value, tolerance %.3g", name, e, flashTol[name])
						}
					}
					for e, x := range got.o {
						if want := bf16.FromFloat32(float32(x)); o16[e] != want {
							t.Fatalf("o16[%d] = %#x, want o = %v rounded, %#x", e, o16[e], x, want)
						}
					}
					if _, again, _ := runFlash(t, k, s, ins[i], cfg); sameBits(b, again) != "" {
						t.Errorf("a second run differs: %s", sameBits(b, again))
					}
				})
			}
		}
		for i, sh := range flashCases {
			t.Run(fmt.Sprintf("%v/same-bits/%+v", k.lib.Variant(), sh), func(t *testing.T) {
				cfgs := flashConfigs(sh.D)
				if len(bits[i]) != len(cfgs) {
					t.Skip("a configuration failed")
				}
				for j := 1; j < len(cfgs); j++ {
					if d := sameBits(bits[i][0], bits[i][j]); d != "" {
						t.Errorf("%v and %v differ: %s", cfgs[0], cfgs[j], d)
					}
				}
			})
		}
	}
}
