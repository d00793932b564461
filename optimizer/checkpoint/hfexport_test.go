package checkpoint

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/safetensors"
)

// hfParams is testParams (matrices taller and wider than a 128 x 128
// block, primes, a scalar, high-precision vectors) with an embedding, a
// projection named as Hugging Face names them, and a norm weight.
func hfParams() []optimizer.Param {
	return append(testParams(),
		optimizer.Param{Name: "model.embed_tokens.weight", Shape: []int{300, 64}},
		optimizer.Param{Name: "model.layers.0.mlp.down_proj.weight", Shape: []int{64, 300}},
		optimizer.Param{Name: "model.norm.weight", Shape: []int{64}, HighPrecision: true, NoDecay: true},
	)
}

// hfCheckpoint trains 2 ranks for 3 steps, saves, and returns the root and
// the masters, assembled from the optimizers (not from the checkpoint).
func hfCheckpoint(t *testing.T) (string, []optimizer.Param, map[string][]float32) {
	t.Helper()
	params := hfParams()
	c := newCluster(t, 2, params, testConfigs()["E4M3 current"], optimizer.FromMap(weights(params, 1)))
	c.train(0, 3)
	root := t.TempDir()
	c.save(root, SaveOptions{ChunkBytes: 4096})
	return root, params, c.snapshot().master
}

// exported is one tensor read back from an export.
type exported struct {
	dtype safetensors.DType
	shape []int
	data  []byte
}

// readHF reads an export with package safetensors and checks its index:
// every tensor of every file is in the weight map under that file, and
// nothing else is; total_size is the sum of the tensors' bytes.
func readHF(t *testing.T, dir string) map[string]exported {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, HFIndexName))
	if err != nil {
		t.Fatal(err)
	}
	var index struct {
		Metadata struct {
			TotalSize int64 `json:"total_size"`
		} `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(raw, &index); err != nil {
		t.Fatal(err)
	}
	files := map[string]bool{}
	for _, f := range index.WeightMap {
		files[f] = true
	}
	out := map[string]exported{}
	var total int64
	for f := range files {
		fh, err := os.Open(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		st, _ := fh.Stat()
		h, _, err := safetensors.Read(fh, st.Size())
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if h.Metadata["format"] != "pt" {
			t.Errorf("%s: metadata %v", f, h.Metadata)
		}
		for _, tn := range h.Tensors {
			if index.WeightMap[tn.Name] != f {
				t.Errorf("%s holds %s, the index says %q", f, tn.Name, index.WeightMap[tn.Name])
			}
			data := make([]byte, tn.End-tn.Begin)
			if _, err := fh.ReadAt(data, h.DataOffset+tn.Begin); err != nil {
				t.Fatal(err)
			}
			out[tn.Name] = exported{tn.DType, tn.Shape, data}
			total += int64(len(data))
		}
		fh.Close()
	}
	if len(out) != len(index.WeightMap) || total != index.Metadata.TotalSize {
		t.Errorf("%d tensors of %d bytes in the files; the index maps %d, total_size %d", len(out), total, len(index.WeightMap), index.Metadata.TotalSize)
	}
	return out
}

// TestExportHFPlain exports BF16 and F32 in files of at most 40000 bytes
// and checks every parameter against the optimizers' masters: F32 bit for
// bit, BF16 rounded to nearest even.
func TestExportHFPlain(t *testing.T) {
	root, params, masters := hfCheckpoint(t)
	for _, dt := range []HFDType{HFBF16, HFF32} {
		t.Run(dt.String(), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "hf")
			var last, total int64
			info, err := ExportHF(root, dir, HFOptions{DType: dt, MaxShardBytes: 40000, Progress: func(d, n int64) { last, total = d, n }})
			if err != nil {
				t.Fatal(err)
			}
			if len(info.Files) < 3 || info.Step != 3 || last != info.TotalSize || total != info.TotalSize {
				t.Errorf("info %+v, progress %d of %d", info, last, total)
			}
			got := readHF(t, dir)
			if len(got) != len(params) {
				t.Errorf("%d tensors, want %d", len(got), len(params))
			}
			for _, p := range params {
				e := got[p.Name]
				if !slices.Equal(e.shape, p.Shape) && !(len(p.Shape) == 0 && len(e.shape) == 0) {
					t.Errorf("%s: shape %v, want %v", p.Name, e.shape, p.Shape)
				}
				for i, x := range masters[p.Name] {
					var ok bool
					if dt == HFF32 {
						ok = e.dtype == safetensors.F32 && binary.LittleEndian.Uint32(e.data[4*i:]) == math.Float32bits(x)
					} else {
						ok = e.dtype == safetensors.BF16 && binary.LittleEndian.Uint16(e.data[2*i:]) == fp8.BF16FromFloat32(x)
					}
					if !ok {
						t.Fatalf("%s[%d]: %s differs from the master %g", p.Name, i, e.dtype, x)
					}
				}
			}
		})
	}
}

// TestExportHFFP8 exports FP8 with block and per-tensor scales in both
// formats and checks, against a direct computation from the masters (a
// loop over each block for its amax, the scale max/amax, and
// Format.Encode of each element), the codes and the scale_inv of every
// FP8 weight, the BF16 of every other parameter, which parameters are FP8
// (the matrices not marked high-precision, not embeddings) and the
// quantization config.
func TestExportHFFP8(t *testing.T) {
	root, params, masters := hfCheckpoint(t)
	for _, tc := range []struct {
		f         fp8.Format
		perTensor bool
	}{{fp8.E4M3, false}, {fp8.E4M3, true}, {fp8.E5M2, false}} {
		t.Run(fmt.Sprintf("%v per-tensor=%v", tc.f, tc.perTensor), func(t *testing.T) {
			dir := t.TempDir()
			info, err := ExportHF(root, dir, HFOptions{DType: HFFP8, Format: tc.f, PerTensor: tc.perTensor})
			if err != nil {
				t.Fatal(err)
			}
			got := readHF(t, dir)
			wantFP8 := []string{"w1", "big", "w2", "model.layers.0.mlp.down_proj.weight"}
			if !slices.Equal(info.FP8, wantFP8) {
				t.Errorf("FP8 parameters %v, want %v", info.FP8, wantFP8)
			}
			for _, p := range params {
				if slices.Contains(wantFP8, p.Name) {
					checkFP8(t, got, p, masters[p.Name], tc.f, tc.perTensor)
					continue
				}
				e := got[p.Name]
				for i, x := range masters[p.Name] {
					if e.dtype != safetensors.BF16 || binary.LittleEndian.Uint16(e.data[2*i:]) != fp8.BF16FromFloat32(x) {
						t.Fatalf("%s[%d]: not the BF16 of %g", p.Name, i, x)
					}
				}
			}
			checkQuantConfig(t, dir, tc.f, tc.perTensor)
		})
	}
}

// checkFP8 checks the codes and scales of one FP8 weight.
func checkFP8(t *testing.T, got map[string]exported, p optimizer.Param, x []float32, f fp8.Format, perTensor bool) {
	t.Helper()
	rows, cols := p.Shape[0], p.Shape[1]
	block := func(i int) int { return (i/cols/HFBlock)*((cols+HFBlock-1)/HFBlock) + i%cols/HFBlock }
	scaleName, scaleShape := p.Name+"_scale_inv", []int{(rows + HFBlock - 1) / HFBlock, (cols + HFBlock - 1) / HFBlock}
	if perTensor {
		block = func(int) int { return 0 }
		scaleName, scaleShape = p.Name+"_scale", []int{}
	}
	n := 1
	if len(scaleShape) == 2 {
		n = scaleShape[0] * scaleShape[1]
	}
	amax := make([]float64, n)
	for i, v := range x {
		amax[block(i)] = math.Max(amax[block(i)], math.Abs(float64(v)))
	}
	w, s := got[p.Name], got[scaleName]
	wantDT := safetensors.DType(safetensors.F8E4M3)
	if f == fp8.E5M2 {
		wantDT = safetensors.F8E5M2
	}
	if w.dtype != wantDT || s.dtype != safetensors.F32 || !slices.Equal(s.shape, scaleShape) && len(scaleShape) > 0 || len(s.data) != 4*n {
		t.Fatalf("%s: %s%v with %s %s%v", p.Name, w.dtype, w.shape, scaleName, s.dtype, s.shape)
	}
	scale := make([]float32, n)
	for b, a := range amax {
		scale[b] = 1
		if a > 0 {
			scale[b] = f.Max() / float32(a)
		}
		if got := math.Float32frombits(binary.LittleEndian.Uint32(s.data[4*b:])); got != 1/scale[b] {
			t.Fatalf("%s block %d: scale_inv %g, want 1/%g", p.Name, b, got, scale[b])
		}
	}
	for i, v := range x {
		if want := f.Encode(v * scale[block(i)]); w.data[i] != want {
			t.Fatalf("%s[%d] = %g: code %#x, want %#x", p.Name, i, v, w.data[i], want)
		}
	}
}

func checkQuantConfig(t *testing.T, dir string, f fp8.Format, perTensor bool) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, HFQuantConfigName))
	if err != nil {
		t.Fatal(err)
	}
	var qc struct {
		QuantMethod      string   `json:"quant_method"`
		Fmt              string   `json:"fmt"`
		ActivationScheme string   `json:"activation_scheme"`
		WeightBlockSize  []int    `json:"weight_block_size"`
		Ignored          []string `json:"ignored_layers"`
		NotConvert       []string `json:"modules_to_not_convert"`
	}
	if err := json.Unmarshal(raw, &qc); err != nil {
		t.Fatal(err)
	}
	wantBlock := []int{128, 128}
	if perTensor {
		wantBlock = nil
	}
	if qc.QuantMethod != "fp8" || qc.Fmt != strings.ToLower(f.String()) || qc.ActivationScheme != "dynamic" || !slices.Equal(qc.WeightBlockSize, wantBlock) ||
		!slices.Equal(qc.Ignored, []string{"model.embed_tokens"}) || !slices.Equal(qc.NotConvert, qc.Ignored) {
		t.Errorf("quantization config %s", raw)
	}
}

// TestExportHFErrors checks the refusals: an export over an export, a
// path without a checkpoint, invalid options.
func TestExportHFErrors(t *testing.T) {
	root, _, _ := hfCheckpoint(t)
	dir := t.TempDir()
	if _, err := ExportHF(root, dir, HFOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ExportHF(root, dir, HFOptions{}); !errors.Is(err, fs.ErrExist) {
		t.Errorf("export over an export: %v", err)
	}
	if _, err := ExportHF(t.TempDir(), t.TempDir(), HFOptions{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("no checkpoint: %v", err)
	}
	for _, o := range []HFOptions{{DType: 7}, {DType: HFFP8, Format: 9}, {MaxShardBytes: -1}} {
		if _, err := ExportHF(root, t.TempDir(), o); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
}

// TestExportHFPython reads FP8 (block and per-tensor) and BF16 exports with
// testdata/read_hf_export.py, an independent reader on Python's standard
// library: it checks the index, the files' layout, and every value
// against the masters (BF16 rounded in Python; FP8 codes decoded and
// multiplied by their scales, within half a step of the format). Skipped
// where python3 is not installed.
func TestExportHFPython(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found")
	}
	root, params, masters := hfCheckpoint(t)
	want := map[string][]float64{}
	for _, p := range params {
		want[p.Name] = widen(masters[p.Name])
	}
	exp := filepath.Join(t.TempDir(), "masters.json")
	b, _ := json.Marshal(want)
	if err := os.WriteFile(exp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, o := range []HFOptions{{DType: HFFP8, MaxShardBytes: 30000}, {DType: HFFP8, PerTensor: true}, {DType: HFFP8, Format: fp8.E5M2}, {}} {
		dir := t.TempDir()
		info, err := ExportHF(root, dir, o)
		if err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(python, filepath.Join("testdata", "read_hf_export.py"), dir, exp).CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "ok") {
			t.Fatalf("%+v: %s", o, out)
		}
		// The reader must notice a wrong value: flip a bit of the last
		// tensor of the first file.
		if o.DType == HFFP8 && !o.PerTensor && o.Format == 0 {
			f := filepath.Join(dir, info.Files[0])
			data, _ := os.ReadFile(f)
			data[len(data)-1] ^= 0x40
			os.WriteFile(f, data, 0o644)
			if out, err := exec.Command(python, filepath.Join("testdata", "read_hf_export.py"), dir, exp).CombinedOutput(); err == nil {
				t.Fatalf("the reader accepted a changed file: %s", out)
			}
		}
	}
}
