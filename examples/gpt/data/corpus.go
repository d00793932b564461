package data

import (
	"bytes"
	"fmt"
	"hash/fnv"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
)

// Extensions are the file name endings the corpus takes: Go code, Go
// assembly, C, and prose.
var Extensions = []string{".go", ".s", ".c", ".h", ".md", ".txt"}

// MaxFileBytes skips larger files (generated tables, test inputs).
const MaxFileBytes = 1 << 20

// ValidPermille is the share of files, in thousandths, in the validation
// split.
const ValidPermille = 50

// File is one file of the corpus.
type File struct {
	// Path relative to the root, with slashes.
	Path  string
	Bytes int64
}

// IsValid reports whether the file at rel (relative path, slashes) is in
// the validation split.
func IsValid(rel string) bool {
	h := fnv.New32a()
	h.Write([]byte(rel))
	return h.Sum32()%1000 < ValidPermille
}

// List returns the files under root the corpus takes, sorted by path:
// regular files with one of Extensions, at most MaxFileBytes, outside
// directories named testdata or starting with a dot.
func List(root string) ([]File, error) {
	var files []File
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (name == "testdata" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !slices.Contains(Extensions, filepath.Ext(name)) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Size() == 0 || info.Size() > MaxFileBytes {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		files = append(files, File{Path: filepath.ToSlash(rel), Bytes: info.Size()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("data: listing %s: %w", root, err)
	}
	slices.SortFunc(files, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	return files, nil
}

// usable reports whether a file's content can join a split: it must not
// contain the separator.
func usable(content []byte) bool {
	return bytes.IndexByte(content, Separator) < 0
}
