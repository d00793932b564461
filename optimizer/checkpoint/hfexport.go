package checkpoint

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/safetensors"
)

// HFDType is the element type of the weights of an ExportHF.
type HFDType int

// The element types of ExportHF.
const (
	// HFBF16 writes every parameter in BF16, rounded to nearest even from
	// the FP32 master.
	HFBF16 HFDType = iota
	// HFFP8 writes the linear layers' weights in FP8 with their scales
	// (see ExportHF) and every other parameter in BF16.
	HFFP8
	// HFF32 writes every parameter as its FP32 master, bit for bit.
	HFF32
)

// String returns "bf16", "fp8" or "f32".
func (d HFDType) String() string {
	switch d {
	case HFBF16:
		return "bf16"
	case HFFP8:
		return "fp8"
	case HFF32:
		return "f32"
	}
	return "HFDType(" + strconv.Itoa(int(d)) + ")"
}

// HFBlock is the side of the square blocks of an FP8 export with block
// scales: 128 x 128, as DeepSeek-V3's FP8 weights and the inference engines
// that load them (vLLM, SGLang, Hugging Face transformers' fine-grained
// FP8) use.
const HFBlock = 128

// DefaultHFShardBytes is the most bytes of tensors in one file of an
// export: 5 GB, the default of Hugging Face's save_pretrained.
const DefaultHFShardBytes = 5_000_000_000

// The stages of an export at which tests may inject failures.
const (
	stageHFShardRename stage = "hf-shard-rename" // before renaming each shard file into place
	stageHFIndexWrite  stage = "hf-index-write"  // before writing the index
	stageHFIndexRename stage = "hf-index-rename" // before renaming the index into place
)

// HFIndexName is the name of an export's index file.
const HFIndexName = "model.safetensors.index.json"

// HFQuantConfigName is the file an FP8 export writes its
// quantization_config into.
const HFQuantConfigName = "quantization_config.json"

// DefaultHFKeep matches the parameters an FP8 export keeps in BF16 besides
// those that are not matrices: embeddings and the output head (names with
// a part "embed..." , "lm_head" or "head"), as FP8 checkpoints of
// inference engines do.
var DefaultHFKeep = regexp.MustCompile(`(^|\.)(embed[^.]*|lm_head|head)(\.|$)`)

// HFOptions tune ExportHF. The zero value exports BF16 in files of at most
// DefaultHFShardBytes.
type HFOptions struct {
	DType HFDType
	// Format is the FP8 format of HFFP8: fp8.E4M3 (the default when zero)
	// or fp8.E5M2.
	Format fp8.Format
	// PerTensor gives each FP8 weight one scale ("weight_scale") instead of
	// one per HFBlock x HFBlock block ("weight_scale_inv").
	PerTensor bool
	// MaxShardBytes bounds the bytes of tensors per file (default
	// DefaultHFShardBytes). A parameter larger than that gets a file of its
	// own; a weight and its scale share a file.
	MaxShardBytes int64
	// Keep, with HFFP8, names parameters to keep in BF16 although they are
	// matrices (default DefaultHFKeep.MatchString).
	Keep func(name string) bool
	// Progress, if not nil, receives the bytes of tensors written.
	Progress Progress
}

// HFInfo describes an export.
type HFInfo struct {
	Step      int      // the checkpoint's step
	Files     []string // the safetensors files, in order, without their directory
	TotalSize int64    // bytes of all tensors (the index's metadata.total_size)
	FP8       []string // the parameters written in FP8
}

// hfTensor is one tensor of an export: a parameter's weights, or the
// scales of its FP8 weights (F32, right after the weights).
type hfTensor struct {
	name  string
	param int // index in the checkpoint's parameters
	dtype safetensors.DType
	shape []int
}

func (t hfTensor) bytes() int64 {
	return int64(numElements(t.shape)) * int64(t.dtype.Size())
}

// ExportHF writes the FP32 masters of the checkpoint at path into dir, as a
// Hugging Face style model: safetensors files of at most MaxShardBytes each,
// and the index HFIndexName. path is a checkpoint directory, or a root with a
// "latest" pointer. Parameters keep their names and shapes. With HFFP8, the
// matrices that are not high-precision and that Keep does not match are
// written in FP8, with their scales, and an FP8 export writes
// HFQuantConfigName too. ExportHF reads one parameter at a time, checks every
// chunk's CRC-32C, and needs no optimizer and no GPU. dir must not hold an
// export already. See docs/DESIGN.md, "Note: Hugging Face export", for the
// files and the scales.
func ExportHF(path, dir string, opts HFOptions) (HFInfo, error) {
	if err := opts.setDefaults(); err != nil {
		return HFInfo{}, err
	}
	src, err := resolve(path)
	if err != nil {
		return HFInfo{}, err
	}
	idx, _, err := readIndex(src)
	if err != nil {
		return HFInfo{}, err
	}
	if _, err := os.Stat(filepath.Join(dir, HFIndexName)); err == nil {
		return HFInfo{}, fmt.Errorf("checkpoint: %s already holds an export (%s): %w", dir, HFIndexName, fs.ErrExist)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return HFInfo{}, fmt.Errorf("checkpoint: %w", err)
	}
	shards, info := planHF(idx, opts)
	r := &masterReader{dir: src, idx: idx, files: map[int]*shardFile{}}
	defer r.close()
	m := &meter{p: opts.Progress, total: info.TotalSize}
	weightMap := map[string]string{}
	for i, sh := range shards {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shards))
		if err := writeHFShard(filepath.Join(dir, name), sh, r, opts, m); err != nil {
			return info, err
		}
		info.Files = append(info.Files, name)
		for _, t := range sh {
			weightMap[t.name] = name
		}
	}
	if opts.DType == HFFP8 {
		if err := writeHFQuantConfig(dir, idx, info.FP8, opts); err != nil {
			return info, err
		}
	}
	return info, writeHFIndex(dir, info.TotalSize, weightMap)
}

func (o *HFOptions) setDefaults() error {
	if o.DType < HFBF16 || o.DType > HFF32 {
		return fmt.Errorf("checkpoint: export type %v: want bf16, fp8 or f32", o.DType)
	}
	if o.Format == 0 {
		o.Format = fp8.E4M3
	}
	if !o.Format.Valid() {
		return fmt.Errorf("checkpoint: export FP8 format %v: want E4M3 or E5M2", o.Format)
	}
	if o.MaxShardBytes == 0 {
		o.MaxShardBytes = DefaultHFShardBytes
	}
	if o.MaxShardBytes < 0 {
		return fmt.Errorf("checkpoint: export shard size %d: want a positive number of bytes", o.MaxShardBytes)
	}
	if o.Keep == nil {
		o.Keep = DefaultHFKeep.MatchString
	}
	return nil
}

// hfIsFP8 reports whether an FP8 export writes p in FP8.
func hfIsFP8(p *paramRec, opts HFOptions) bool {
	return opts.DType == HFFP8 && !p.HighPrecision && len(p.Shape) == 2 && !opts.Keep(p.Name)
}

// hfScaleName is the name of the scales of the FP8 weights name.
func hfScaleName(name string, perTensor bool) string {
	if perTensor {
		return name + "_scale"
	}
	return name + "_scale_inv"
}

// planHF lists the tensors of the export, cut into shards of at most
// opts.MaxShardBytes (a parameter's weights and scales together), and
// fills the Step, TotalSize and FP8 of the info.
func planHF(idx *index, opts HFOptions) ([][]hfTensor, HFInfo) {
	info := HFInfo{Step: idx.Step}
	var shards [][]hfTensor
	var cur []hfTensor
	var curBytes int64
	for i := range idx.Params {
		p := &idx.Params[i]
		group := []hfTensor{{name: p.Name, param: i, dtype: safetensors.BF16, shape: p.Shape}}
		switch {
		case opts.DType == HFF32:
			group[0].dtype = safetensors.F32
		case hfIsFP8(p, opts):
			group[0].dtype = safetensors.F8E4M3
			if opts.Format == fp8.E5M2 {
				group[0].dtype = safetensors.F8E5M2
			}
			scale := hfTensor{name: hfScaleName(p.Name, opts.PerTensor), param: i, dtype: safetensors.F32, shape: []int{}}
			if !opts.PerTensor {
				rows, cols := fp8.Matrix(p.Shape)
				scale.shape = []int{ceilDiv(rows, HFBlock), ceilDiv(cols, HFBlock)}
			}
			group = append(group, scale)
			info.FP8 = append(info.FP8, p.Name)
		}
		var n int64
		for _, t := range group {
			n += t.bytes()
		}
		if len(cur) > 0 && curBytes+n > opts.MaxShardBytes {
			shards, cur, curBytes = append(shards, cur), nil, 0
		}
		cur, curBytes = append(cur, group...), curBytes+n
		info.TotalSize += n
	}
	if len(cur) > 0 || len(shards) == 0 {
		shards = append(shards, cur)
	}
	return shards, info
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// writeHFShard writes the tensors of one shard into path atomically.
func writeHFShard(path string, tensors []hfTensor, r *masterReader, opts HFOptions, m *meter) error {
	specs := make([]safetensors.Spec, len(tensors))
	for i, t := range tensors {
		specs[i] = safetensors.Spec{Name: t.name, DType: t.dtype, Shape: t.shape}
	}
	_, raw, err := safetensors.Encode(specs, map[string]string{"format": "pt"})
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	f, err := os.OpenFile(path+".tmp", os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	err = func() error {
		if _, err := w.Write(raw); err != nil {
			return err
		}
		for i := 0; i < len(tensors); i++ {
			t := tensors[i]
			vals, err := r.read(&r.idx.Params[t.param])
			if err != nil {
				return err
			}
			data, scales := encodeHF(vals, t, opts)
			if _, err := w.Write(data); err != nil {
				return err
			}
			m.add(int64(len(data)))
			if scales != nil { // the next tensor is t's scales
				i++
				if _, err := w.Write(scales); err != nil {
					return err
				}
				m.add(int64(len(scales)))
			}
		}
		return w.Flush()
	}()
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return fmt.Errorf("checkpoint: writing %s: %w", f.Name(), err)
	}
	return commitFile(f, path, stageHFShardRename, 0)
}

// encodeHF encodes the values of the parameter of t as t's type; for FP8
// it also returns the bytes of the scales.
func encodeHF(vals []float32, t hfTensor, opts HFOptions) (data, scales []byte) {
	switch t.dtype {
	case safetensors.F32, safetensors.BF16:
		data = make([]byte, len(vals)*t.dtype.Size())
		encodeValues(data, vals, t.dtype)
		return data, nil
	}
	data = make([]byte, len(vals))
	var scaleInv []float32
	if opts.PerTensor {
		s, si := fp8.ScaleFromAmax(fp8.Amax(vals), opts.Format, 0, false)
		fp8.CastScaled(data, vals, s, opts.Format)
		scaleInv = []float32{si}
	} else {
		rows, cols := fp8.Matrix(t.shape)
		amax := make([]float32, ceilDiv(rows, HFBlock)*ceilDiv(cols, HFBlock))
		fp8.TileAmax(amax, vals, 0, cols, HFBlock)
		scale := make([]float32, len(amax))
		scaleInv = make([]float32, len(amax))
		for i, a := range amax {
			scale[i], scaleInv[i] = fp8.ScaleFromAmax(a, opts.Format, 0, false)
		}
		fp8.CastTiles(data, vals, 0, cols, HFBlock, scale, opts.Format)
	}
	scales = make([]byte, 4*len(scaleInv))
	for i, s := range scaleInv {
		binary.LittleEndian.PutUint32(scales[4*i:], math.Float32bits(s))
	}
	return data, scales
}

// masterReader reads whole parameters' masters from a checkpoint, keeping
// the shard files it opened.
type masterReader struct {
	dir   string
	idx   *index
	files map[int]*shardFile
}

// read returns the FP32 master of p, assembled from its pieces.
func (r *masterReader) read(p *paramRec) ([]float32, error) {
	vals := make([]float32, numElements(p.Shape))
	for _, pc := range p.Pieces {
		s, ok := r.files[pc.Rank]
		if !ok {
			var err error
			if s, err = openShard(r.dir, r.idx.Files[pc.Rank]); err != nil {
				return nil, err
			}
			r.files[pc.Rank] = s
		}
		t, err := s.tensor(pc.Tensor+"/master", safetensors.F32, pc.Len)
		if err != nil {
			return nil, err
		}
		req := request{begin: t.Begin, end: t.Begin + 4*int64(pc.Len), dt: safetensors.F32, dst: vals[pc.Offset : pc.Offset+pc.Len]}
		if err := readRequests(s, []request{req}); err != nil {
			return nil, err
		}
	}
	return vals, nil
}

func (r *masterReader) close() {
	for _, s := range r.files {
		s.Close()
	}
}

// writeHFIndex writes HFIndexName, last.
func writeHFIndex(dir string, total int64, weightMap map[string]string) error {
	b, err := json.MarshalIndent(map[string]any{
		"metadata":   map[string]any{"total_size": total},
		"weight_map": weightMap,
	}, "", "  ")
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return writeFileAtomic(filepath.Join(dir, HFIndexName), append(b, '\n'), stageHFIndexWrite, stageHFIndexRename, 0)
}

// writeHFQuantConfig writes HFQuantConfigName.
func writeHFQuantConfig(dir string, idx *index, quantized []string, opts HFOptions) error {
	isFP8 := map[string]bool{}
	for _, name := range quantized {
		isFP8[name] = true
	}
	kept := []string{}
	for _, p := range idx.Params {
		if len(p.Shape) == 2 && !isFP8[p.Name] {
			kept = append(kept, strings.TrimSuffix(p.Name, ".weight"))
		}
	}
	qc := map[string]any{
		"quant_method":           "fp8",
		"fmt":                    strings.ToLower(opts.Format.String()),
		"activation_scheme":      "dynamic",
		"ignored_layers":         kept,
		"modules_to_not_convert": kept,
	}
	if !opts.PerTensor {
		qc["weight_block_size"] = []int{HFBlock, HFBlock}
	}
	b, err := json.MarshalIndent(qc, "", "  ")
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return writeFileAtomic(filepath.Join(dir, HFQuantConfigName), append(b, '\n'), "", "", 0)
}
