package checkpoint

import (
	"fmt"
	"os"
	"path/filepath"
)

// stage names a point of a save at which a test may inject a failure (or
// kill the process). Every rename of a save is preceded by its own stage.
type stage string

const (
	stagePrepare      stage = "prepare"       // rank 0, before it creates the staging directory
	stageShardWrite   stage = "shard-write"   // every rank, before it creates its temporary shard file
	stageShardHalf    stage = "shard-half"    // every rank, half-way through writing its shard data
	stageShardRename  stage = "shard-rename"  // every rank, before renaming its shard file into place
	stageIndexWrite   stage = "index-write"   // rank 0, before writing the temporary index
	stageIndexRename  stage = "index-rename"  // rank 0, before renaming the index into place
	stageDirRename    stage = "dir-rename"    // rank 0, before renaming the staging directory to its step name
	stageLatestWrite  stage = "latest-write"  // rank 0, before writing the temporary "latest" pointer
	stageLatestRename stage = "latest-rename" // rank 0, before renaming the pointer into place
	stageStateWrite   stage = "state-write"   // every rank with a RankState, before writing its temporary state file
	stageStateRename  stage = "state-rename"  // every rank with a RankState, before renaming it into place
	stageExportWrite  stage = "export-write"  // every rank, before writing its part of an export
	stageExportRename stage = "export-rename" // rank 0, before renaming the export into place
)

// testHook, when set (by tests only), runs at every stage; an error it
// returns fails the save at that point as an I/O error would.
var testHook func(st stage, rank int) error

func hook(st stage, rank int) error {
	if testHook == nil {
		return nil
	}
	if err := testHook(st, rank); err != nil {
		return fmt.Errorf("checkpoint: at stage %s: %w", st, err)
	}
	return nil
}

// syncDir makes the entries of a directory (creations, renames) durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("checkpoint: syncing directory %s: %w", dir, err)
	}
	return nil
}

// commitFile makes the temporary file f durable and renames it to final in
// the same directory, then syncs the directory. f is closed either way; on
// error the temporary file is removed.
func commitFile(f *os.File, final string, st stage, rank int) (err error) {
	tmp := f.Name()
	defer func() {
		if err != nil {
			os.Remove(tmp)
		}
	}()
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("checkpoint: syncing %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("checkpoint: closing %s: %w", tmp, err)
	}
	if err := hook(st, rank); err != nil {
		return err
	}
	if err := os.Rename(tmp, final); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return syncDir(filepath.Dir(final))
}

// writeFileAtomic writes data to path through a temporary file in the same
// directory: written, synced, renamed, directory synced. A crash at any
// point leaves path either as it was or complete.
func writeFileAtomic(path string, data []byte, write, rename stage, rank int) error {
	if err := hook(write, rank); err != nil {
		return err
	}
	f, err := os.OpenFile(path+".tmp", os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(f.Name())
		return fmt.Errorf("checkpoint: writing %s: %w", f.Name(), err)
	}
	return commitFile(f, path, rename, rank)
}
