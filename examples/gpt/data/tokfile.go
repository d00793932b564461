package data

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
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
// tokens. A token outside the vocabulary, a bad header or a length that
// disagrees with the header is an error.
func ReadTokens(path string) (vocab int, tokens []uint16, err error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0, nil, fmt.Errorf("data: %w", err)
	}
	if len(raw) < headerSize || string(raw[:8]) != magic {
		return 0, nil, fmt.Errorf("%w: %s (bad header)", ErrFormat, path)
	}
	vocab = int(binary.LittleEndian.Uint32(raw[8:]))
	n := binary.LittleEndian.Uint64(raw[16:])
	body := raw[headerSize:]
	if uint64(len(body)) != 2*n {
		return 0, nil, fmt.Errorf("%w: %s holds %d bytes of tokens, header says %d tokens", ErrFormat, path, len(body), n)
	}
	tokens = make([]uint16, n)
	for i := range tokens {
		t := binary.LittleEndian.Uint16(body[2*i:])
		if int(t) >= vocab {
			return 0, nil, fmt.Errorf("%w: %s: token %d at %d outside the vocabulary of %d", ErrFormat, path, t, i, vocab)
		}
		tokens[i] = t
	}
	return vocab, tokens, nil
}
