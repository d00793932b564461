package data

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// The token file format: the 8-byte magic, the vocabulary size (uint32,
// little-endian), 4 reserved zero bytes, the token count (uint64), then
// the tokens as uint16 little-endian. A reference reads it with
// numpy.fromfile(path, dtype="<u2", offset=24).
const (
	magic      = "DOGPTTK1"
	headerSize = 24
)

// ErrFormat is returned for a file that is not a token file.
var ErrFormat = errors.New("data: not a token file")

// WriteTokens writes tokens to path in the token file format.
func WriteTokens(path string, vocab int, tokens []uint16) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("data: %w", err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	var h [headerSize]byte
	copy(h[:], magic)
	binary.LittleEndian.PutUint32(h[8:], uint32(vocab))
	binary.LittleEndian.PutUint64(h[16:], uint64(len(tokens)))
	w.Write(h[:])
	var b [2]byte
	for _, t := range tokens {
		binary.LittleEndian.PutUint16(b[:], t)
		w.Write(b[:])
	}
	err = w.Flush()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("data: writing %s: %w", path, err)
	}
	return nil
}

// ReadTokens reads a token file and returns its vocabulary size and
// tokens. A token outside the vocabulary, a bad header, a length that
// disagrees with the header, or a path that is not a regular file (a
// device such as /dev/zero, a named pipe) is an error. It streams the file
// and allocates only the tokens the file's size holds, so what it reads is
// bounded by the file on disk.
func ReadTokens(path string) (vocab int, tokens []uint16, err error) {
	st, err := os.Stat(path)
	if err != nil {
		return 0, nil, fmt.Errorf("data: %w", err)
	}
	if !st.Mode().IsRegular() {
		return 0, nil, fmt.Errorf("%w: %s is not a regular file (mode %s)", ErrFormat, path, st.Mode().Type())
	}
	f, err := os.Open(path)
	if err != nil {
		return 0, nil, fmt.Errorf("data: %w", err)
	}
	defer f.Close()
	var h [headerSize]byte
	if _, err := io.ReadFull(f, h[:]); err != nil || string(h[:8]) != magic {
		return 0, nil, fmt.Errorf("%w: %s (bad header)", ErrFormat, path)
	}
	vocab = int(binary.LittleEndian.Uint32(h[8:]))
	n := binary.LittleEndian.Uint64(h[16:])
	if body := uint64(st.Size() - headerSize); n > body/2 || body != 2*n {
		return 0, nil, fmt.Errorf("%w: %s holds %d bytes of tokens, header says %d tokens", ErrFormat, path, body, n)
	}
	tokens = make([]uint16, n)
	if err := readBody(bufio.NewReaderSize(f, 1<<20), tokens, vocab); err != nil {
		return 0, nil, fmt.Errorf("%w: %s: %v", ErrFormat, path, err)
	}
	return vocab, tokens, nil
}

// readBody reads exactly len(tokens) tokens from r, each below vocab, and
// checks that nothing follows them.
func readBody(r io.Reader, tokens []uint16, vocab int) error {
	var b [2]byte
	for i := range tokens {
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return fmt.Errorf("token %d: %v", i, err)
		}
		t := binary.LittleEndian.Uint16(b[:])
		if int(t) >= vocab {
			return fmt.Errorf("token %d at %d outside the vocabulary of %d", t, i, vocab)
		}
		tokens[i] = t
	}
	if n, _ := r.Read(b[:1]); n != 0 {
		return fmt.Errorf("bytes past the %d tokens its header counts", len(tokens))
	}
	return nil
}
