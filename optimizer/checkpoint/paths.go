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
// ErrNotFound (matching fs.ErrNotExist) when there is no pointer; with
// ErrCorrupt when the pointer is not a regular file (a named pipe, a
// symbolic link loop) or does not name a step directory; and with
// ErrIncomplete when the step directory it names does not exist.
func Latest(root string) (string, error) {
	path := filepath.Join(root, latestName)
	b, err := readRegular(path, maxLatestBytes, "a latest pointer")
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("checkpoint: %s has no %q pointer: %w: %w", root, latestName, ErrNotFound, fs.ErrNotExist)
	}
	if err != nil {
		return "", err
	}
	name, err := parseLatest(b)
	if err != nil {
		return "", fmt.Errorf("checkpoint: %s %w", path, err)
	}
	dir := filepath.Join(root, name)
	if !present(dir) {
		return "", fmt.Errorf("checkpoint: %s names %s, which does not exist (removed, or the root copied in part): %w", path, name, ErrIncomplete)
	}
	return dir, nil
}

// parseLatest returns the step directory name that the content b of a
// latest pointer holds, or an error wrapping ErrCorrupt (its text to
// follow the pointer's path).
func parseLatest(b []byte) (string, error) {
	name := strings.TrimSpace(string(b))
	if m := stepDirRE.FindStringSubmatch(name); m == nil || m[2] != "" {
		return "", fmt.Errorf("names %q, not a step directory: %w", name, ErrCorrupt)
	}
	return name, nil
}

// resolve turns what the caller passed to Load into a checkpoint
// directory: the directory itself when it holds an index, else the target
// of its "latest" pointer. A staging directory is never a checkpoint, even
// with its index written: the save committed nothing before the rename.
// An index or pointer that is present but unreadable (a named pipe, a
// symbolic link loop) is reported as such by the read that follows.
func resolve(path string) (string, error) {
	if m := stepDirRE.FindStringSubmatch(filepath.Base(path)); m != nil && m[2] != "" {
		return "", fmt.Errorf("checkpoint: %s is the staging directory of a save that did not finish: %w", path, ErrIncomplete)
	}
	if present(filepath.Join(path, indexName)) {
		return path, nil
	}
	if present(filepath.Join(path, latestName)) {
		return Latest(path)
	}
	if stepDirRE.MatchString(filepath.Base(path)) && present(path) {
		return "", fmt.Errorf("checkpoint: %s has no %s (a save that did not finish): %w", path, indexName, ErrIncomplete)
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

// newest returns the step below which a save into root moves latest
// backwards: the step latest names when it names an existing step
// directory; otherwise (no pointer, or one that is garbled, unreadable or
// names a removed step) the highest step of a complete checkpoint under
// root, one whose index.json is in place. It returns -1 when there is
// neither, and why latest was not used (nil when it was).
func newest(root string) (step int, latestErr error) {
	dir, err := Latest(root)
	if err == nil {
		m := stepDirRE.FindStringSubmatch(filepath.Base(dir))
		if n, aerr := strconv.Atoi(m[1]); aerr == nil {
			return n, nil
		}
		err = fmt.Errorf("checkpoint: %s names a step past the integers", root)
	}
	dirs, _ := stepDirs(root) // an unreadable root holds no checkpoint to protect
	step = -1
	for _, d := range dirs {
		if !d.staging && d.step > step && isRegular(filepath.Join(root, d.name, indexName)) {
			step = d.step
		}
	}
	return step, err
}

// isRegular reports whether path is a regular file (not followed if a
// link).
func isRegular(path string) bool {
	st, err := os.Lstat(path)
	return err == nil && st.Mode().IsRegular()
}
