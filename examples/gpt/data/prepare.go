package data

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Names of the files Prepare writes into its output directory.
const (
	TrainFile = "train.tok"
	ValidFile = "valid.tok"
	MetaFile  = "meta.json"
)

// Split describes one split in meta.json.
type Split struct {
	Files  int    `json:"files"`
	Tokens int    `json:"tokens"`
	SHA256 string `json:"sha256"` // of the tokens as uint16 little-endian
}

// Meta is the content of meta.json: what Prepare read and wrote.
type Meta struct {
	Root      string `json:"root"`
	Tokenizer string `json:"tokenizer"`
	Vocab     int    `json:"vocab"`
	Skipped   int    `json:"skipped"` // files holding the separator
	Train     Split  `json:"train"`
	Valid     Split  `json:"valid"`
}

// Build reads the corpus under root and returns the tokens of the
// training and validation splits with their description. report, if not
// nil, receives the bytes read: done of total.
func Build(root string, report func(done, total int64)) (train, valid []uint16, meta Meta, err error) {
	files, err := List(root)
	if err != nil {
		return nil, nil, meta, err
	}
	if report == nil {
		report = func(int64, int64) {}
	}
	var total, done int64
	for _, f := range files {
		total += f.Bytes
	}
	meta = Meta{Root: root, Tokenizer: "bytes", Vocab: Vocab}
	for _, f := range files {
		content, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f.Path)))
		if err != nil {
			return nil, nil, meta, fmt.Errorf("data: %w", err)
		}
		done += f.Bytes
		report(done, total)
		if !usable(content) {
			meta.Skipped++
			continue
		}
		toks := append(Encode(content), Separator)
		if IsValid(f.Path) {
			valid = append(valid, toks...)
			meta.Valid.Files++
		} else {
			train = append(train, toks...)
			meta.Train.Files++
		}
	}
	report(total, total)
	meta.Train.Tokens, meta.Train.SHA256 = len(train), digest(train)
	meta.Valid.Tokens, meta.Valid.SHA256 = len(valid), digest(valid)
	if len(train) == 0 || len(valid) == 0 {
		return nil, nil, meta, fmt.Errorf("data: %s gives %d training and %d validation tokens: both splits must be non-empty", root, len(train), len(valid))
	}
	return train, valid, meta, nil
}

// Prepare builds the corpus under root and writes TrainFile, ValidFile and
// MetaFile into dir (created if needed). report is Build's.
func Prepare(root, dir string, report func(done, total int64)) (Meta, error) {
	train, valid, meta, err := Build(root, report)
	if err != nil {
		return meta, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return meta, fmt.Errorf("data: %w", err)
	}
	if err := WriteTokens(filepath.Join(dir, TrainFile), Vocab, train); err != nil {
		return meta, err
	}
	if err := WriteTokens(filepath.Join(dir, ValidFile), Vocab, valid); err != nil {
		return meta, err
	}
	js, _ := json.MarshalIndent(meta, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, MetaFile), append(js, '\n'), 0o644); err != nil {
		return meta, fmt.Errorf("data: %w", err)
	}
	return meta, nil
}

func digest(tokens []uint16) string {
	h := sha256.New()
	b := make([]byte, 2*len(tokens))
	for i, t := range tokens {
		b[2*i], b[2*i+1] = byte(t), byte(t>>8)
	}
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}
