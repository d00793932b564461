package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// A rank's own state (SaveOptions.RankState): what the training program
// keeps outside the optimizer and must get back to resume bit for bit,
// such as a model's amax histories of delayed activation scaling. Each
// rank writes its own file into the staging directory next to its shard,
// so the checkpoint holds it under the same atomicity; Load hands it back
// (Info.RankState) to the same rank when the world size is the one saved.
//
// The file is rank-NNNNN-of-WWWWW.state: rankStateMagic, the SHA-256 of
// the data, the data.

// rankStateMagic opens a rank state file (version 1).
var rankStateMagic = []byte("DORSTAT1")

// rankStateName is the file of rank's state in a checkpoint of world ranks.
func rankStateName(rank, world int) string {
	return fmt.Sprintf("rank-%05d-of-%05d.state", rank, world)
}

// writeRankState writes data as rank's state file into dir.
func writeRankState(dir string, rank, world int, data []byte) error {
	sum := sha256.Sum256(data)
	b := append(append(append([]byte(nil), rankStateMagic...), sum[:]...), data...)
	return writeFileAtomic(filepath.Join(dir, rankStateName(rank, world)), b, stageStateWrite, stageStateRename, rank)
}

// readRankState returns rank's state saved in checkpoint dir of saved
// ranks when this load runs on as many (world); nil when none was saved,
// or when the world differs (a rank's state belongs to its rank).
func readRankState(dir string, rank, world, saved int) ([]byte, error) {
	if world != saved {
		return nil, nil
	}
	path := filepath.Join(dir, rankStateName(rank, world))
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	n := len(rankStateMagic)
	if len(b) < n+sha256.Size || !bytes.Equal(b[:n], rankStateMagic) {
		return nil, fmt.Errorf("checkpoint: %s is not a rank state file: %w", path, ErrCorrupt)
	}
	data := b[n+sha256.Size:]
	if sum := sha256.Sum256(data); !bytes.Equal(sum[:], b[n:n+sha256.Size]) {
		return nil, fmt.Errorf("checkpoint: rank state %s: %w", path, ErrChecksum)
	}
	return data, nil
}
