package main

import (
	"bytes"
	"io"
	"sync"
)

// maxLine bounds how much of a line without its end a prefixer holds: a
// longer one is written out in pieces, each ended by a newline.
const maxLine = 64 << 10

// syncWriter serializes the writes of several prefixers to one writer, so
// that lines of different ranks never interleave.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

// Write writes b as one write; it never fails.
func (s *syncWriter) Write(b []byte) (int, error) {
	s.write(b)
	return len(b), nil
}

func (s *syncWriter) write(b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, _ = s.w.Write(b)
}

// prefixer writes each line written to it to out, prefix first, as one
// write. A final line without a newline is written by flush.
type prefixer struct {
	out    *syncWriter
	prefix []byte
	line   []byte // the current line, prefix included
}

func newPrefixer(out *syncWriter, prefix string) *prefixer {
	return &prefixer{out: out, prefix: []byte(prefix), line: []byte(prefix)}
}

func (p *prefixer) Write(b []byte) (int, error) {
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			p.line = append(p.line, b...)
			if len(p.line)-len(p.prefix) >= maxLine {
				p.flush()
			}
			break
		}
		p.line = append(p.line, b[:i+1]...)
		p.out.write(p.line)
		p.line = append(p.line[:0], p.prefix...)
		b = b[i+1:]
	}
	return n, nil
}

// flush writes the pending partial line, ended by a newline.
func (p *prefixer) flush() {
	if len(p.line) > len(p.prefix) {
		p.out.write(append(p.line, '\n'))
		p.line = append(p.line[:0], p.prefix...)
	}
}
