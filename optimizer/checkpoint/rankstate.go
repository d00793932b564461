package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
)

// A rank's own state (SaveOptions.RankState): what the training program
// keeps outside the optimizer and must get back to resume bit for bit,
// such as a model's amax histories of delayed activation scaling. Each
// rank writes its own file into the staging directory next to its shard,
// so the checkpoint holds it under the same atomicity, and records the
// SHA-256 of its bytes in its shard's file record of the index
// (fileRecord.State): a load then finds a missing or altered file, and
// Verify checks it. Load hands it back (Info.RankState) to the same rank
// when the world size is the one saved.
//
// The file is rank-RRRRR-of-WWWWW.state: rankStateMagic, then the bytes.

// rankStateMagic opens a rank state file (version 1).
var rankStateMagic = []byte("DORSTAT1")

// MaxRankStateBytes is the most SaveOptions.RankState may hold.
const MaxRankStateBytes = 1 << 30

// rankStateName is the file of rank's state in a checkpoint of world ranks.
func rankStateName(rank, world int) string {
	return fmt.Sprintf("rank-%05d-of-%05d.state", rank, world)
}

// rankStateSum is the SHA-256 of a rank's state, as the index records it.
func rankStateSum(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

// writeRankState writes data as rank's state file into dir and returns
// its sum for the index.
func writeRankState(dir string, rank, world int, data []byte) (string, error) {
	if len(data) > MaxRankStateBytes {
		return "", fmt.Errorf("checkpoint: SaveOptions.RankState of %d bytes: at most MaxRankStateBytes (%d): %w", len(data), MaxRankStateBytes, ErrOptions)
	}
	b := append(append([]byte(nil), rankStateMagic...), data...)
	err := writeFileAtomic(filepath.Join(dir, rankStateName(rank, world)), b, stageStateWrite, stageStateRename, rank)
	return rankStateSum(data), err
}

// readRankState returns the state that record rec's rank saved in
// checkpoint dir of world ranks: nil when it saved none; ErrMissingFile,
// ErrCorrupt or ErrChecksum when the file is not the one recorded.
func readRankState(dir string, rec fileRecord, world int) ([]byte, error) {
	if rec.State == "" {
		return nil, nil
	}
	path := filepath.Join(dir, rankStateName(rec.Rank, world))
	b, err := readRegular(path, int64(len(rankStateMagic))+MaxRankStateBytes, "MaxRankStateBytes")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("checkpoint: rank %d's state %s: %w", rec.Rank, path, ErrMissingFile)
	}
	if err != nil {
		return nil, err
	}
	if !bytes.HasPrefix(b, rankStateMagic) {
		return nil, fmt.Errorf("checkpoint: %s is not a rank state file: %w", path, ErrCorrupt)
	}
	data := b[len(rankStateMagic):]
	if got := rankStateSum(data); got != rec.State {
		return nil, fmt.Errorf("checkpoint: rank state %s has SHA-256 %s, recorded %s: %w", path, got, rec.State, ErrChecksum)
	}
	return data, nil
}

// loadRankState returns the state rank saved in the checkpoint of idx at
// dir when this load runs on as many ranks (world); nil otherwise, or when
// the rank saved none.
func loadRankState(dir string, idx *index, rank, world int) ([]byte, error) {
	if world != idx.World {
		return nil, nil
	}
	for _, rec := range idx.Files {
		if rec.Rank == rank {
			return readRankState(dir, rec, world)
		}
	}
	return nil, nil
}
