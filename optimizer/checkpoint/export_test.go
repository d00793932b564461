package checkpoint

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/optimizertest"
	"github.com/distopt/distopt/safetensors"
)

func (c *cluster) export(path string) []error {
	return c.run(func(r int, o *optimizer.Optimizer, comm collective.Communicator) error {
		ctx, cancel := testCtx()
		defer cancel()
		return Export(ctx, o, comm, path)
	})
}

// TestExportImport exports the masters of 3 ranks as one file, checks the
// file tensor by tensor, and starts 2 ranks from it with OpenImport.
func TestExportImport(t *testing.T) {
	params, cfg := testParams(), testConfigs()["E4M3 current"]
	src := newCluster(t, 3, params, cfg, optimizer.FromMap(weights(params, 1)))
	src.train(0, 2)
	want := src.snapshot()
	path := filepath.Join(t.TempDir(), "model.safetensors")
	src.must(src.export(path))

	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := f.Stat()
	h, _, err := safetensors.Read(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	if h.Metadata["format"] != "pt" || len(h.Tensors) != len(params) {
		t.Fatalf("metadata %v, %d tensors", h.Metadata, len(h.Tensors))
	}
	for _, p := range params {
		tn, ok := h.Lookup(p.Name)
		if !ok || tn.DType != safetensors.F32 || !slices.Equal(tn.Shape, p.Shape) {
			t.Fatalf("tensor %s: %+v", p.Name, tn)
		}
		raw := make([]byte, tn.End-tn.Begin)
		if _, err := f.ReadAt(raw, h.DataOffset+tn.Begin); err != nil {
			t.Fatal(err)
		}
		for i, x := range want.master[p.Name] {
			if binary.LittleEndian.Uint32(raw[4*i:]) != math.Float32bits(x) {
				t.Fatalf("%s[%d] in the file differs from the master", p.Name, i)
			}
		}
	}
	f.Close()
	if _, err := os.Stat(path + ".tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temporary file left: %v", err)
	}

	im, err := OpenImport(path, params)
	if err != nil {
		t.Fatal(err)
	}
	dst := newCluster(t, 2, params, cfg, im.Init)
	if err := im.Close(); err != nil {
		t.Fatal(err)
	}
	got := dst.snapshot()
	for _, p := range params {
		if i := optimizertest.FirstDiff(got.master[p.Name], want.master[p.Name]); i >= 0 {
			t.Fatalf("imported master of %s differs at %d", p.Name, i)
		}
	}

	t.Run("refusals", func(t *testing.T) {
		bad := testParams()
		bad[0].Shape = []int{129, 37}
		if _, err := OpenImport(path, bad); !errors.Is(err, ErrShape) {
			t.Fatalf("other shape: %v, want ErrShape", err)
		}
		bad = append(testParams(), optimizer.Param{Name: "extra", Shape: []int{2}})
		if _, err := OpenImport(path, bad); !errors.Is(err, ErrParamMissing) {
			t.Fatalf("missing tensor: %v, want ErrParamMissing", err)
		}
		if _, err := OpenImport(path+".none", params); !errors.Is(err, ErrMissingFile) {
			t.Fatalf("missing file: %v, want ErrMissingFile", err)
		}
		short := filepath.Join(t.TempDir(), "short.safetensors")
		b, _ := os.ReadFile(path)
		os.WriteFile(short, b[:len(b)-1], 0o644)
		if _, err := OpenImport(short, params); !errors.Is(err, ErrTruncated) {
			t.Fatalf("truncated file: %v, want ErrTruncated", err)
		}
	})

	t.Run("interrupted", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "x.safetensors")
		for _, st := range []stage{stageExportWrite, stageExportRename} {
			testHook = func(s stage, rank int) error {
				if s == st && rank == 0 {
					return errInjected
				}
				return nil
			}
			errs := src.export(out)
			testHook = nil
			for r, err := range errs {
				if err == nil {
					t.Fatalf("%s: rank %d succeeded", st, r)
				}
			}
			for _, p := range []string{out, out + ".tmp"} {
				if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("%s: %s exists after a failed export", st, p)
				}
			}
		}
	})
}

// TestImportTypes imports a hand-made file of BF16, F16 and F64 tensors.
func TestImportTypes(t *testing.T) {
	vals := []float64{0, -1.5, 65504, 6e-8, math.Inf(-1), 0.1}
	specs := []safetensors.Spec{{Name: "h", DType: safetensors.F16, Shape: []int{6}}, {Name: "b", DType: safetensors.BF16, Shape: []int{2, 3}}, {Name: "d", DType: safetensors.F64, Shape: []int{6}}}
	h, raw, err := safetensors.Encode(specs, nil)
	if err != nil {
		t.Fatal(err)
	}
	f16 := []uint16{0x0000, 0xbe00, 0x7bff, 0x0001, 0xfc00, 0x2e66} // 0.1 rounds to 0x2e66
	bf := []uint16{0x0000, 0xbfc0, 0x4780, 0x3381, 0xff80, 0x3dcd}
	for _, x := range f16 {
		raw = binary.LittleEndian.AppendUint16(raw, x)
	}
	for _, x := range bf {
		raw = binary.LittleEndian.AppendUint16(raw, x)
	}
	for _, x := range vals {
		raw = binary.LittleEndian.AppendUint64(raw, math.Float64bits(x))
	}
	if int64(len(raw)) != h.Size() {
		t.Fatalf("file of %d bytes, header says %d", len(raw), h.Size())
	}
	path := filepath.Join(t.TempDir(), "t.safetensors")
	os.WriteFile(path, raw, 0o644)
	params := []optimizer.Param{{Name: "h", Shape: []int{6}}, {Name: "b", Shape: []int{2, 3}}, {Name: "d", Shape: []int{6}}}
	im, err := OpenImport(path, params)
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	want := map[string][]float32{
		// 0x2e66: exponent 11 - 15, mantissa 0x266.
		"h": {0, -1.5, 65504, float32(math.Ldexp(1, -24)), float32(math.Inf(-1)), float32(math.Ldexp(1+float64(0x266)/1024, -4))},
		"b": {0, -1.5, 65536, math.Float32frombits(0x33810000), float32(math.Inf(-1)), math.Float32frombits(0x3dcd0000)},
		"d": {0, -1.5, 65504, 6e-8, float32(math.Inf(-1)), 0.1},
	}
	for name, w := range want {
		got := make([]float32, 4)
		im.Init(name, 2, got)
		if i := optimizertest.FirstDiff(got, w[2:]); i >= 0 {
			t.Fatalf("%s[%d] = %g, want %g", name, 2+i, got[i], w[2+i])
		}
	}
	if err := im.Err(); err != nil {
		t.Fatal(err)
	}
	im.Init("h", 4, make([]float32, 3)) // past the end
	if !errors.Is(im.Err(), ErrShape) {
		t.Fatalf("read past the end: %v, want ErrShape", im.Err())
	}
}

// TestFloat32FromF16 checks every binary16 pattern against the value the
// format defines, computed in float64: (-1)^s 2^(e-15) (1 + m/1024), or
// 2^-14 m/1024 when e = 0; Inf and NaN (payload kept) when e = 31.
func TestFloat32FromF16(t *testing.T) {
	for h := range 1 << 16 {
		s, e, m := h>>15, (h>>10)&0x1f, h&0x3ff
		got := float32FromF16(uint16(h))
		var want float64
		switch {
		case e == 31 && m == 0:
			want = math.Inf(1)
		case e == 31:
			if !math.IsNaN(float64(got)) || math.Float32bits(got)&0x7fffff != uint32(m)<<13 {
				t.Fatalf("%#04x: %#08x, want a NaN with payload %#x", h, math.Float32bits(got), m)
			}
			continue
		case e == 0:
			want = math.Ldexp(float64(m)/1024, -14)
		default:
			want = math.Ldexp(1+float64(m)/1024, e-15)
		}
		if s == 1 {
			want = -want
		}
		if float64(got) != want || math.Signbit(float64(got)) != (s == 1) {
			t.Fatalf("%#04x: %g, want %g", h, got, want)
		}
	}
}
