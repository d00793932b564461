package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
)

// Verify checks a whole checkpoint (a directory, or a root with a "latest"
// pointer) without loading it: the index (with everything Load checks of
// it: its step against its scalars and directory, its layout and pieces
// against its parameters), that every shard file holds the tensors the
// index places in it, every byte of every shard file against the
// file's SHA-256 and its chunks' CRC-32C, and every rank state file
// (SaveOptions.RankState) against its recorded SHA-256. Load checks
// only what it reads; Verify is the offline check of everything, for
// example before deleting older checkpoints. Errors are those of Load
// (ErrNotFound, ErrIncomplete, ErrVersion, ErrMissingFile, ErrTruncated,
// ErrChecksum, ErrCorrupt).
func Verify(path string) (Info, error) {
	dir, err := resolve(path)
	if err != nil {
		return Info{}, err
	}
	idx, _, err := readIndex(dir)
	if err != nil {
		return Info{}, err
	}
	info := Info{Dir: dir, Step: idx.Step, World: idx.World}
	for _, rec := range idx.Files {
		if err := verifyFile(dir, idx, rec); err != nil {
			return info, err
		}
		if _, err := readRankState(dir, rec, idx.World); err != nil {
			return info, err
		}
	}
	return info, nil
}

func verifyFile(dir string, idx *index, rec fileRecord) error {
	s, err := openShard(dir, rec)
	if err != nil {
		return err
	}
	defer s.Close()
	if err := idx.verifyTensors(s, rec.Rank); err != nil {
		return err
	}
	whole := sha256.New()
	data := &chunkSums{size: int(s.chunk)}
	_, err = io.Copy(whole, io.NewSectionReader(s.f, 0, s.h.DataOffset))
	if err == nil {
		_, err = io.Copy(io.MultiWriter(whole, data), io.NewSectionReader(s.f, s.h.DataOffset, s.h.DataLen))
	}
	if err != nil {
		return fmt.Errorf("checkpoint: reading %s: %w", s.path, err)
	}
	if got := hex.EncodeToString(whole.Sum(nil)); got != rec.SHA256 {
		return fmt.Errorf("checkpoint: %s has SHA-256 %s, recorded %s: %w", s.path, got, rec.SHA256, ErrChecksum)
	}
	if !slices.Equal(data.finish(), s.sums) {
		return fmt.Errorf("checkpoint: %s: chunk checksums differ from its header: %w", s.path, ErrChecksum)
	}
	return nil
}
