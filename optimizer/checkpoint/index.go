package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/shard"
)

// FormatVersion is the version of the checkpoint format this package
// writes. It reads every version up to this one and refuses newer ones
// with ErrVersion.
const FormatVersion = 1

// formatName identifies a distopt index and distopt shard files.
const formatName = "distopt-checkpoint"

// indexFile is the outer object of index.json. Body is kept as raw bytes
// so that its checksum is taken over exactly what is on disk.
type indexFile struct {
	Format     string          `json:"format"`
	Version    int             `json:"version"`
	BodySHA256 string          `json:"body_sha256"`
	Body       json.RawMessage `json:"body"`
}

// index is the body of index.json.
type index struct {
	Step    int          `json:"step"`
	World   int          `json:"world"`
	Config  configRecord `json:"config"`
	Layout  layoutRecord `json:"layout"`
	Params  []paramRec   `json:"params"`
	Scalars scalarRecord `json:"scalars"`
	Files   []fileRecord `json:"files"` // by rank
	// FP8SHA256 and HighPrecisionSHA256 digest the gathered parameters at
	// save time (see paramDigests).
	FP8SHA256           string `json:"fp8_params_sha256"`
	HighPrecisionSHA256 string `json:"high_precision_params_sha256"`
}

type configRecord struct {
	Rule       string       `json:"rule"`
	Recipe     recipeRecord `json:"recipe"`
	MomentType string       `json:"moment_type"` // of the saved moment tensors
	// MomentTypes is the optimizer's type of each moment when they are not
	// all MomentType ("fp8", "bfloat16", "float32").
	MomentTypes       []string `json:"moment_types,omitempty"`
	GradType          string   `json:"grad_type"`
	HighPrecisionType string   `json:"high_precision_type"`
	LossScaler        bool     `json:"loss_scaler"`
	Groups            []string `json:"groups"` // informational
}

type recipeRecord struct {
	Format        string `json:"format"`
	Scaling       string `json:"scaling"`
	Margin        int    `json:"margin"`
	PowerOf2      bool   `json:"power_of_2"`
	HistoryLen    int    `json:"history_len"`
	HistoryReduce string `json:"history_reduce"`
}

type layoutRecord struct {
	Fingerprint    string `json:"fingerprint"`
	BucketElements int    `json:"bucket_elements"`
	Align          int    `json:"align"`
	// HighPrecisionAlign is recorded when it is not shard.HighPrecisionAlign
	// (FP8 moments raise it to their block).
	HighPrecisionAlign int            `json:"high_precision_align,omitempty"`
	Buckets            []bucketRecord `json:"buckets"`
}

type bucketRecord struct {
	HighPrecision bool  `json:"high_precision"`
	Params        []int `json:"params"`
	Size          int   `json:"size"`
	ShardSize     int   `json:"shard_size"`
}

type paramRec struct {
	Name          string        `json:"name"`
	Shape         []int         `json:"shape"`
	HighPrecision bool          `json:"high_precision"`
	Pieces        []pieceRecord `json:"pieces"` // by offset, tiling [0, elements)
}

// pieceRecord is a saved piece: elements [Offset, Offset+Len) of the
// parameter, held by rank Rank's file as tensors Tensor+"/master", "/m" and
// "/v" (the moments of the rule).
type pieceRecord struct {
	Rank   int    `json:"rank"`
	Offset int    `json:"offset"`
	Len    int    `json:"len"`
	Tensor string `json:"tensor"`
}

// scalarRecord holds ScalarState. Float32 values are stored as their IEEE
// bit patterns so that every value, NaN and Inf included, round-trips.
type scalarRecord struct {
	Step          int                 `json:"step"`
	LossScale     float64             `json:"loss_scale"`
	LossScaleGood int                 `json:"loss_scale_good"`
	AmaxHistory   map[string][]uint32 `json:"amax_history_bits,omitempty"` // by FP8 parameter, oldest first
	CastScale     map[string]uint32   `json:"cast_scale_bits,omitempty"`   // by FP8 parameter
}

// fileRecord describes one shard file.
type fileRecord struct {
	Name         string `json:"name"`
	Rank         int    `json:"rank"`
	Size         int64  `json:"size"`
	SHA256       string `json:"sha256"`        // of the whole file
	HeaderSHA256 string `json:"header_sha256"` // of the length prefix and header JSON
	// State is the SHA-256 of the rank's SaveOptions.RankState, when it
	// saved one (rank-RRRRR-of-WWWWW.state; empty: none).
	State string `json:"state_sha256,omitempty"`
}

func numElements(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// encodeIndex serialises idx as index.json bytes.
func encodeIndex(idx *index) ([]byte, error) {
	body, err := json.MarshalIndent(idx, "  ", "  ")
	if err != nil {
		return nil, fmt.Errorf("checkpoint: encoding the index: %w", err)
	}
	out, err := json.MarshalIndent(indexFile{Format: formatName, Version: FormatVersion, BodySHA256: sha256Hex(body), Body: body}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("checkpoint: encoding the index: %w", err)
	}
	return append(out, '\n'), nil
}

// readIndex reads and checks the index of a checkpoint directory. It
// returns the index and the checksum of its body (which identifies the
// checkpoint).
func readIndex(dir string) (*index, string, error) {
	path := filepath.Join(dir, indexName)
	raw, err := readRegular(path, MaxIndexBytes, "MaxIndexBytes")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", fmt.Errorf("checkpoint: %s is missing (a save that did not finish): %w", path, ErrIncomplete)
	}
	if err != nil {
		return nil, "", err
	}
	return parseIndex(raw, path, dir)
}

// parseIndex checks and decodes the bytes raw of the index at path, in
// checkpoint directory dir (whose name it checks against the step).
func parseIndex(raw []byte, path, dir string) (*index, string, error) {
	var f indexFile
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, "", fmt.Errorf("checkpoint: %s: %v: %w", path, err, ErrCorrupt)
	}
	if f.Format != formatName {
		return nil, "", fmt.Errorf("checkpoint: %s has format %q, not %q: %w", path, f.Format, formatName, ErrCorrupt)
	}
	if f.Version > FormatVersion {
		return nil, "", fmt.Errorf("checkpoint: %s has format version %d, this reader knows up to %d: %w", path, f.Version, FormatVersion, ErrVersion)
	}
	if f.Version < 1 {
		return nil, "", fmt.Errorf("checkpoint: %s has format version %d: %w", path, f.Version, ErrCorrupt)
	}
	sum := sha256Hex(f.Body)
	if sum != f.BodySHA256 {
		return nil, "", fmt.Errorf("checkpoint: %s: body checksum %s, recorded %s: %w", path, sum, f.BodySHA256, ErrChecksum)
	}
	idx := new(index)
	dec := json.NewDecoder(bytes.NewReader(f.Body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(idx); err != nil {
		return nil, "", fmt.Errorf("checkpoint: %s: %v: %w", path, err, ErrCorrupt)
	}
	for _, check := range []func() error{idx.validate, func() error { return idx.checkDerived(dir) }, idx.checkRecords} {
		if err := check(); err != nil {
			return nil, "", fmt.Errorf("checkpoint: %s: %w", path, err)
		}
	}
	return idx, sum, nil
}

// validate checks the index's internal consistency: one file per rank, and
// pieces that tile every parameter exactly and name existing ranks.
func (idx *index) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrCorrupt)
	}
	if idx.World < 1 || len(idx.Files) != idx.World {
		return bad("world size %d with %d files", idx.World, len(idx.Files))
	}
	for r, f := range idx.Files {
		if f.Rank != r || f.Name != filepath.Base(f.Name) || f.Name == "" || f.Size < 8 {
			return bad("file record %d (%+v) is malformed", r, f)
		}
	}
	if idx.Config.MomentType != buffer.Float32.String() && idx.Config.MomentType != buffer.BFloat16.String() {
		return bad("moment type %q", idx.Config.MomentType)
	}
	seen := map[string]bool{}
	for _, p := range idx.Params {
		if seen[p.Name] || p.Name == "" {
			return bad("parameter name %q is empty or repeated", p.Name)
		}
		seen[p.Name] = true
		at := 0
		for _, pc := range p.Pieces {
			if pc.Offset != at || pc.Len < 1 || pc.Rank < 0 || pc.Rank >= idx.World || pc.Tensor == "" {
				return bad("parameter %q: piece %+v does not continue at element %d", p.Name, pc, at)
			}
			at += pc.Len
		}
		for _, d := range p.Shape {
			if d < 1 {
				return bad("parameter %q has shape %v", p.Name, p.Shape)
			}
		}
		if at != numElements(p.Shape) {
			return bad("parameter %q: pieces cover %d of %d elements", p.Name, at, numElements(p.Shape))
		}
	}
	return nil
}

// layoutIndex records the layout, parameters and saved pieces.
func layoutIndex(l *shard.Layout) (layoutRecord, []paramRec) {
	lr := layoutRecord{Fingerprint: l.Fingerprint(), BucketElements: l.Options.BucketElements, Align: l.Options.Align}
	if a := l.Options.HighPrecisionAlign; a != shard.HighPrecisionAlign {
		lr.HighPrecisionAlign = a
	}
	params := make([]paramRec, len(l.Params))
	for i, p := range l.Params {
		params[i] = paramRec{Name: p.Name, Shape: slices.Clone(p.Shape), HighPrecision: p.HighPrecision}
		if params[i].Shape == nil {
			params[i].Shape = []int{}
		}
	}
	for b, bk := range l.Buckets {
		lr.Buckets = append(lr.Buckets, bucketRecord{HighPrecision: bk.HighPrecision, Params: slices.Clone(bk.Params), Size: bk.Size, ShardSize: bk.ShardSize})
		for r := range l.World {
			for _, pc := range l.Pieces(b, r) {
				params[pc.Param].Pieces = append(params[pc.Param].Pieces, pieceRecord{Rank: r, Offset: pc.ParamOffset, Len: pc.Len, Tensor: tensorBase(l.Params[pc.Param].Name, pc.ParamOffset)})
			}
		}
	}
	return lr, params
}

// tensorBase names the tensors of a piece: the parameter's name and the
// piece's first element.
func tensorBase(param string, offset int) string { return fmt.Sprintf("%s@%d", param, offset) }

// configIndex records the configuration.
func configIndex(c optimizer.Config) configRecord {
	r := c.Recipe
	cr := configRecord{
		Rule:              c.Rule.String(),
		MomentType:        storedMomentType(c).String(),
		MomentTypes:       momentTypeNames(c),
		GradType:          c.GradType.String(),
		HighPrecisionType: c.HighPrecisionType.String(),
		LossScaler:        c.LossScaler != nil,
		Recipe: recipeRecord{Format: r.Format.String(), Scaling: r.Scaling.String(), Margin: r.Margin, PowerOf2: r.PowerOf2,
			HistoryLen: r.HistoryLen, HistoryReduce: r.HistoryReduce.String()},
	}
	for _, g := range c.Groups {
		cr.Groups = append(cr.Groups, fmt.Sprintf("%s lr=%s wd=%g", g.Name, g.LR, g.WeightDecay))
	}
	return cr
}
