package checkpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

const (
	indexName     = "index.json"
	latestName    = "latest"
	stagingSuffix = ".tmp"
)

var stepDirRE = regexp.MustCompile(`^step-(\d{8,})(\.tmp)?$`)

// stepDirName is the directory of the checkpoint of a step.
func stepDirName(step int) string { return fmt.Sprintf("step-%08d", step) }

// shardName is the file rank writes in a checkpoint of world ranks.
func shardName(rank, world int) string {
	return fmt.Sprintf("rank-%05d-of-%05d.safetensors", rank, world)
}

// Latest returns the checkpoint directory that root's "latest" pointer
// names: the newest complete checkpoint saved under root. It fails with
// ErrNotFound (matching fs.ErrNotExist) when there is no pointer, and with
// ErrCorrupt when the pointer does not name a step directory.
func Latest(root string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, latestName))
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("checkpoint: %s has no %q pointer: %w: %w", root, latestName, ErrNotFound, fs.ErrNotExist)
	}
	if err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	name := strings.TrimSpace(string(b))
	if m := stepDirRE.FindStringSubmatch(name); m == nil || m[2] != "" {
		return "", fmt.Errorf("checkpoint: %s/%s names %q, not a step directory: %w", root, latestName, name, ErrCorrupt)
	}
	return filepath.Join(root, name), nil
}

// resolve turns what the caller passed to Load into a checkpoint
// directory: the directory itself when it holds an index, else the target
// of its "latest" pointer. A staging directory is never a checkpoint, even
// with its index written: the save committed nothing before the rename.
func resolve(path string) (string, error) {
	if m := stepDirRE.FindStringSubmatch(filepath.Base(path)); m != nil && m[2] != "" {
		return "", fmt.Errorf("checkpoint: %s is the staging directory of a save that did not finish: %w", path, ErrIncomplete)
	}
	if _, err := os.Stat(filepath.Join(path, indexName)); err == nil {
		return path, nil
	}
	if _, err := os.Stat(filepath.Join(path, latestName)); err == nil {
		return Latest(path)
	}
	if stepDirRE.MatchString(filepath.Base(path)) {
		if _, err := os.Stat(path); err == nil {
			return "", fmt.Errorf("checkpoint: %s has no %s (a save that did not finish): %w", path, indexName, ErrIncomplete)
		}
	}
	return "", fmt.Errorf("checkpoint: %s holds neither %s nor %q: %w: %w", path, indexName, latestName, ErrNotFound, fs.ErrNotExist)
}

// stepDirs lists the step directories under root with their steps;
// staging directories have staging true.
func stepDirs(root string) ([]stepDir, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	var out []stepDir
	for _, e := range entries {
		m := stepDirRE.FindStringSubmatch(e.Name())
		if m == nil || !e.IsDir() {
			continue
		}
		step, err := strconv.Atoi(m[1])
		if err != nil {
			continue
		}
		out = append(out, stepDir{name: e.Name(), step: step, staging: m[2] != ""})
	}
	return out, nil
}

type stepDir struct {
	name    string
	step    int
	staging bool
}
