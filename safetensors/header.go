package safetensors

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/bits"
	"slices"
	"strconv"
)

// MaxHeader is the largest header Read accepts, in bytes (the limit of the
// reference implementation).
const MaxHeader = 100 << 20

// metadataKey is the reserved header key of the string-to-string metadata.
const metadataKey = "__metadata__"

// Spec describes a tensor to lay out in a new file.
type Spec struct {
	Name  string
	DType DType
	Shape []int // empty for a scalar
}

// Tensor is a tensor of a file: its name, type, shape and the byte range
// [Begin, End) of its data relative to the start of the data section.
type Tensor struct {
	Name       string
	DType      DType
	Shape      []int
	Begin, End int64
}

// NumElements is the product of the shape (1 for a scalar).
func (t Tensor) NumElements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= int64(d)
	}
	return n
}

// Header is the decoded header of a file.
type Header struct {
	// Tensors in the order of their data (by Begin, then End).
	Tensors []Tensor
	// Metadata is the "__metadata__" map (nil when absent).
	Metadata map[string]string
	// DataOffset is the file offset of the data section: 8 plus the header
	// length.
	DataOffset int64
	// DataLen is the length of the data section in bytes.
	DataLen int64

	byName map[string]int
}

// Lookup returns the tensor called name.
func (h *Header) Lookup(name string) (Tensor, bool) {
	i, ok := h.byName[name]
	if !ok {
		return Tensor{}, false
	}
	return h.Tensors[i], true
}

// Size is the size of the whole file: DataOffset + DataLen.
func (h *Header) Size() int64 { return h.DataOffset + h.DataLen }

func (h *Header) index() {
	h.byName = make(map[string]int, len(h.Tensors))
	for i, t := range h.Tensors {
		h.byName[t.Name] = i
	}
}

// byteLen returns the byte length of a tensor of dtype dt and shape, or
// false on an unknown dtype, a negative dimension or overflow past int64.
func byteLen(dt DType, shape []int) (int64, bool) {
	n := uint64(dt.Size())
	if n == 0 {
		return 0, false
	}
	for _, d := range shape {
		if d < 0 {
			return 0, false
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > math.MaxInt64 {
			return 0, false
		}
		n = lo
	}
	return int64(n), true
}

// Encode lays out specs contiguously in the order given and returns the
// header (Tensors in that order) and its bytes: the 8-byte length prefix and
// the JSON, padded with spaces to a multiple of 8 bytes. The caller writes
// the data section after them. It fails with ErrFormat on an empty or
// duplicate name, the name "__metadata__", an unknown dtype or a negative
// dimension.
func Encode(specs []Spec, metadata map[string]string) (*Header, []byte, error) {
	h := &Header{Metadata: metadata}
	var js bytes.Buffer
	js.WriteByte('{')
	sep := func() {
		if js.Len() > 1 {
			js.WriteByte(',')
		}
	}
	if metadata != nil {
		keys := make([]string, 0, len(metadata))
		for k := range metadata {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		js.WriteString(strconv.Quote(metadataKey) + ":{")
		for i, k := range keys {
			if i > 0 {
				js.WriteByte(',')
			}
			writeString(&js, k)
			js.WriteByte(':')
			writeString(&js, metadata[k])
		}
		js.WriteByte('}')
	}
	seen := make(map[string]bool, len(specs))
	var off int64
	for _, s := range specs {
		if s.Name == "" || s.Name == metadataKey || seen[s.Name] {
			return nil, nil, fmt.Errorf("safetensors: tensor name %q is empty, reserved or repeated: %w", s.Name, ErrFormat)
		}
		seen[s.Name] = true
		n, ok := byteLen(s.DType, s.Shape)
		if !ok || off+n < off {
			return nil, nil, fmt.Errorf("safetensors: tensor %q: dtype %q with shape %v: %w", s.Name, s.DType, s.Shape, ErrFormat)
		}
		t := Tensor{Name: s.Name, DType: s.DType, Shape: slices.Clone(s.Shape), Begin: off, End: off + n}
		if t.Shape == nil {
			t.Shape = []int{}
		}
		h.Tensors = append(h.Tensors, t)
		off += n
		sep()
		writeString(&js, s.Name)
		fmt.Fprintf(&js, `:{"dtype":%s,"shape":[`, strconv.Quote(string(s.DType)))
		for i, d := range s.Shape {
			if i > 0 {
				js.WriteByte(',')
			}
			js.WriteString(strconv.Itoa(d))
		}
		fmt.Fprintf(&js, `],"data_offsets":[%d,%d]}`, t.Begin, t.End)
	}
	js.WriteByte('}')
	for js.Len()%8 != 0 {
		js.WriteByte(' ')
	}
	out := make([]byte, 8+js.Len())
	binary.LittleEndian.PutUint64(out, uint64(js.Len()))
	copy(out[8:], js.Bytes())
	h.DataOffset = int64(len(out))
	h.DataLen = off
	h.index()
	return h, out, nil
}

// writeString writes s as a JSON string (encoding/json's escaping).
func writeString(b *bytes.Buffer, s string) {
	q, _ := json.Marshal(s) // a string always marshals
	b.Write(q)
}

// Read reads and validates the header of a file of size bytes. It returns
// the header and its raw bytes (length prefix included), which is what a
// caller checksums. A file shorter than the length prefix or than the data
// the header describes fails with ErrTruncated; every other violation of
// the format (see the package doc) with ErrFormat; a failed read with the
// reader's error.
func Read(r io.ReaderAt, size int64) (*Header, []byte, error) {
	if size < 8 {
		return nil, nil, fmt.Errorf("safetensors: %d bytes, shorter than the length prefix: %w", size, ErrTruncated)
	}
	var pre [8]byte
	if _, err := r.ReadAt(pre[:], 0); err != nil {
		return nil, nil, fmt.Errorf("safetensors: reading the length prefix: %w", err)
	}
	n := binary.LittleEndian.Uint64(pre[:])
	if n > MaxHeader {
		return nil, nil, fmt.Errorf("safetensors: header of %d bytes exceeds %d: %w", n, MaxHeader, ErrFormat)
	}
	if int64(n) > size-8 {
		return nil, nil, fmt.Errorf("safetensors: header of %d bytes in a file of %d: %w", n, size, ErrTruncated)
	}
	raw := make([]byte, 8+n)
	copy(raw, pre[:])
	if _, err := r.ReadAt(raw[8:], 8); err != nil {
		return nil, nil, fmt.Errorf("safetensors: reading the header: %w", err)
	}
	h, err := Parse(raw[8:])
	if err != nil {
		return nil, nil, err
	}
	h.DataOffset = 8 + int64(n)
	switch got := size - h.DataOffset; {
	case got < h.DataLen:
		return nil, nil, fmt.Errorf("safetensors: data section of %d bytes, header describes %d: %w", got, h.DataLen, ErrTruncated)
	case got > h.DataLen:
		return nil, nil, fmt.Errorf("safetensors: %d bytes past the last tensor: %w", got-h.DataLen, ErrFormat)
	}
	return h, raw, nil
}

// entry is a tensor's value in the header JSON.
type entry struct {
	DType   *DType   `json:"dtype"`
	Shape   *[]int   `json:"shape"`
	Offsets *[]int64 `json:"data_offsets"`
}

// Parse decodes and validates header JSON (without the length prefix). The
// returned header has DataOffset 0; DataLen is the end of the last tensor.
func Parse(js []byte) (*Header, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("safetensors: %s: %w", fmt.Sprintf(format, args...), ErrFormat)
	}
	if len(js) == 0 || js[0] != '{' {
		return nil, bad("header does not start with '{'")
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil {
		return nil, bad("header: %v", err)
	}
	h := &Header{}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, bad("header: %v", err)
		}
		name := tok.(string) // object keys are always strings
		if seen[name] {
			return nil, bad("key %q appears twice", name)
		}
		if name == "" {
			return nil, bad("a tensor without a name")
		}
		seen[name] = true
		if name == metadataKey {
			if err := dec.Decode(&h.Metadata); err != nil {
				return nil, bad("metadata must map strings to strings: %v", err)
			}
			continue
		}
		var e entry
		if err := dec.Decode(&e); err != nil {
			return nil, bad("tensor %q: %v", name, err)
		}
		if e.DType == nil || e.Shape == nil || e.Offsets == nil || len(*e.Offsets) != 2 {
			return nil, bad("tensor %q needs dtype, shape and two data_offsets", name)
		}
		t := Tensor{Name: name, DType: *e.DType, Shape: *e.Shape, Begin: (*e.Offsets)[0], End: (*e.Offsets)[1]}
		n, ok := byteLen(t.DType, t.Shape)
		if !ok {
			return nil, bad("tensor %q: dtype %q with shape %v", name, t.DType, t.Shape)
		}
		if t.Begin < 0 || t.End < t.Begin || t.End-t.Begin != n {
			return nil, bad("tensor %q: data_offsets [%d, %d] for %d bytes", name, t.Begin, t.End, n)
		}
		h.Tensors = append(h.Tensors, t)
	}
	if _, err := dec.Token(); err != nil {
		return nil, bad("header: %v", err)
	}
	if rest := bytes.TrimLeft(js[dec.InputOffset():], " "); len(rest) != 0 {
		return nil, bad("%d bytes after the header object", len(rest))
	}
	slices.SortStableFunc(h.Tensors, func(a, b Tensor) int {
		return cmp.Or(cmp.Compare(a.Begin, b.Begin), cmp.Compare(a.End, b.End))
	})
	for _, t := range h.Tensors {
		if t.Begin != h.DataLen {
			return nil, bad("tensor %q starts at %d, the previous one ends at %d", t.Name, t.Begin, h.DataLen)
		}
		h.DataLen = t.End
	}
	h.index()
	return h, nil
}
