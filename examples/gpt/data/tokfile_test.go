package data

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestReadTokensBounds: ReadTokens reads back what WriteTokens wrote, and
// refuses, without reading past the file's own size, what is not a token
// file: a device (/dev/zero, which has no end), a directory, a header
// whose count disagrees with the file's size either way, bytes past the
// counted tokens, a token outside the vocabulary. Before, /dev/zero grew
// memory without bound.
func TestReadTokensBounds(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.tok")
	want := []uint16{1, 2, 3, 255, 0}
	if err := WriteTokens(good, 256, want); err != nil {
		t.Fatal(err)
	}
	if v, got, err := ReadTokens(good); err != nil || v != 256 || !slices.Equal(got, want) {
		t.Fatalf("round trip: %d %v %v", v, got, err)
	}
	raw, _ := os.ReadFile(good)
	withCount := func(n uint64) []byte {
		b := slices.Clone(raw)
		binary.LittleEndian.PutUint64(b[16:], n)
		return b
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	badToken := slices.Clone(raw)
	badToken[headerSize+2] = 0x01 // token 3 becomes 259
	badToken[headerSize+3] = 0x01
	cases := []struct {
		name, path, says string
	}{
		{"device", "/dev/zero", "is not a regular file"},
		{"directory", dir, "is not a regular file"},
		{"count past the file", write("long.tok", withCount(1<<62)), "header says 4611686018427387904 tokens"},
		{"count of 2^63", write("huge.tok", withCount(1<<63)), "header says 9223372036854775808 tokens"},
		{"count short of the file", write("short.tok", withCount(4)), "header says 4 tokens"},
		{"odd byte after", write("odd.tok", append(slices.Clone(raw), 7)), "header says 5 tokens"},
		{"token outside the vocabulary", write("vocab.tok", badToken), "token 257 at 1 outside the vocabulary of 256"},
		{"header cut", write("cut.tok", raw[:10]), "bad header"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := os.Stat(c.path); err != nil {
				t.Skip(err)
			}
			_, _, err := ReadTokens(c.path)
			if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("%v, want ErrFormat saying %q", err, c.says)
			}
		})
	}
}
