package backendtest

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer/backend"
)

// pair runs each call on the reference (CPU) and the backend under test.
type pair struct {
	t        *testing.T
	ref, be  backend.Backend
	refBufs  []buffer.Buffer
	testBufs []buffer.Buffer
}

// buf is one buffer present on both backends with the same initial bytes.
type buf struct {
	ref, be buffer.Buffer
	kind    kind
	name    string
	init    []byte // the initial bytes
	lead    int    // bytes before those the calls are given (uploadAfter)
}

// side returns b on side 0 (the reference) or 1 (the backend under test)
// from its lead bytes on, or nil for a buffer not uploaded.
func (b buf) side(s int) buffer.Buffer {
	if b.ref == nil {
		return nil
	}
	x := []buffer.Buffer{b.ref, b.be}[s]
	if b.lead == 0 {
		return x
	}
	return x.Slice(b.lead, x.Len())
}

// kind says how two buffers are compared.
type kind int

const (
	bytesExact kind = iota // every byte equal
	float32s               // float32 words: equal bits, or both NaN
	amaxKeys               // uint32 keys: equal, or both NaN keys (> 0x7f800000)
)

// upload allocates init's bytes on both backends.
func (p *pair) upload(name string, init []byte, k kind) buf {
	p.t.Helper()
	b := buf{kind: k, name: name, init: init}
	var err error
	if b.ref, err = p.ref.Alloc(len(init)); err != nil {
		p.t.Fatal(err)
	}
	if b.be, err = p.be.Alloc(len(init)); err != nil {
		p.t.Fatal(err)
	}
	p.refBufs = append(p.refBufs, b.ref)
	p.testBufs = append(p.testBufs, b.be)
	must(p.t, p.ref.Write(b.ref, 0, init))
	must(p.t, p.be.Write(b.be, 0, init))
	return b
}

// uploadAfter is upload with lead bytes of fillByte before init's: calls
// are given the buffer from there on (buf.side), and check compares the
// whole allocation, so the bytes before must stay untouched.
func (p *pair) uploadAfter(name string, lead int, init []byte, k kind) buf {
	p.t.Helper()
	b := p.upload(name, append(filled(lead), init...), k)
	b.lead = lead
	return b
}

// free releases every buffer of the pair.
func (p *pair) free() {
	for _, b := range p.refBufs {
		p.ref.Free(b)
	}
	for _, b := range p.testBufs {
		p.be.Free(b)
	}
	p.refBufs, p.testBufs = nil, nil
}

// check compares the buffers' bytes after both backends synced.
func (p *pair) check(bs ...buf) {
	p.t.Helper()
	must(p.t, p.ref.Sync())
	must(p.t, p.be.Sync())
	for _, b := range bs {
		if b.ref == nil {
			continue
		}
		want := make([]byte, b.ref.Len())
		got := make([]byte, b.be.Len())
		must(p.t, p.ref.Read(want, b.ref, 0))
		must(p.t, p.be.Read(got, b.be, 0))
		if bad := diff(want, got, b.kind); len(bad) > 0 {
			p.t.Errorf("%s: %d mismatches with the CPU reference; first: %s", b.name, len(bad), bad[0])
		}
	}
}

// diff lists the mismatches of got against want.
func diff(want, got []byte, k kind) []string {
	var bad []string
	if k == bytesExact {
		for i := range want {
			if want[i] != got[i] {
				bad = append(bad, fmt.Sprintf("byte %d: want %#02x, got %#02x", i, want[i], got[i]))
			}
		}
		return bad
	}
	for i := 0; i+4 <= len(want); i += 4 {
		w, g := binary.LittleEndian.Uint32(want[i:]), binary.LittleEndian.Uint32(got[i:])
		if w == g {
			continue
		}
		switch k {
		case float32s:
			if math.IsNaN(float64(math.Float32frombits(w))) && math.IsNaN(float64(math.Float32frombits(g))) {
				continue
			}
		case amaxKeys:
			if w > 0x7f800000 && g > 0x7f800000 {
				continue
			}
		}
		bad = append(bad, fmt.Sprintf("word %d: want %#08x (%g), got %#08x (%g)", i/4, w, math.Float32frombits(w), g, math.Float32frombits(g)))
	}
	return bad
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// untouched checks that the reference's buffers still hold their initial
// bytes (a skipped step writes nothing; check compares the backend's).
func (p *pair) untouched(bs ...buf) {
	p.t.Helper()
	for _, b := range bs {
		if b.ref == nil {
			continue
		}
		got := make([]byte, b.ref.Len())
		must(p.t, p.ref.Read(got, b.ref, 0))
		if bad := diff(b.init, got, bytesExact); len(bad) > 0 {
			p.t.Errorf("%s written by a skipped step: %d changes; first: %s", b.name, len(bad), bad[0])
		}
	}
}
