package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"testing"
)

// file assembles a file from header JSON and a data section, by hand.
func file(js string, data int) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(js)))
	b = append(b, js...)
	return append(b, make([]byte, data)...)
}

func TestEncodeGolden(t *testing.T) {
	h, raw, err := Encode([]Spec{
		{Name: "w", DType: F32, Shape: []int{2, 3}},
		{Name: "s", DType: BF16},
		{Name: `q"<`, DType: U8, Shape: []int{0}},
	}, map[string]string{"b": "2", "a": "1"})
	if err != nil {
		t.Fatal(err)
	}
	js := `{"__metadata__":{"a":"1","b":"2"},"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},` +
		`"s":{"dtype":"BF16","shape":[],"data_offsets":[24,26]},"q\"\u003c":{"dtype":"U8","shape":[0],"data_offsets":[26,26]}}`
	js += strings.Repeat(" ", (8-len(js)%8)%8)
	if want := file(js, 0); !bytes.Equal(raw, want) {
		t.Fatalf("header bytes\n got %q\nwant %q", raw, want)
	}
	if h.DataOffset != int64(len(raw)) || h.DataLen != 26 || h.DataOffset%8 != 0 {
		t.Fatalf("DataOffset %d DataLen %d", h.DataOffset, h.DataLen)
	}
	if s, ok := h.Lookup("s"); !ok || s.Begin != 24 || s.End != 26 || len(s.Shape) != 0 {
		t.Fatalf("Lookup(s) = %+v, %t", s, ok)
	}
}

func TestRoundTrip(t *testing.T) {
	specs := []Spec{
		{Name: "b.weight", DType: F32, Shape: []int{3, 1, 5}},
		{Name: "a", DType: F16, Shape: []int{7}},
		{Name: "empty", DType: F64, Shape: []int{4, 0}},
		{Name: "e4m3", DType: F8E4M3, Shape: []int{9}},
		{Name: "z", DType: I64},
	}
	h, raw, err := Encode(specs, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	f := append(raw, make([]byte, h.DataLen)...)
	got, gotRaw, err := Read(bytes.NewReader(f), int64(len(f)))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(gotRaw, raw) {
		t.Fatal("raw header differs")
	}
	if got.Metadata["format"] != "pt" || got.DataOffset != h.DataOffset || got.DataLen != h.DataLen {
		t.Fatalf("header %+v", got)
	}
	for _, s := range specs {
		a, ok1 := h.Lookup(s.Name)
		b, ok2 := got.Lookup(s.Name)
		if !ok1 || !ok2 || a.DType != b.DType || !slices.Equal(a.Shape, b.Shape) || a.Begin != b.Begin || a.End != b.End {
			t.Fatalf("%s: encoded %+v, read %+v", s.Name, a, b)
		}
		if n, _ := byteLen(s.DType, s.Shape); b.End-b.Begin != n {
			t.Fatalf("%s: %d bytes, want %d", s.Name, b.End-b.Begin, n)
		}
	}
}

func TestReadInvalid(t *testing.T) {
	const ok = `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`
	cases := []struct {
		name string
		file []byte
		want error
	}{
		{"short prefix", []byte{1, 2, 3}, ErrTruncated},
		{"header past end", file(ok, 0)[:20], ErrTruncated},
		{"data truncated", file(ok, 7), ErrTruncated},
		{"trailing bytes", file(ok, 9), ErrFormat},
		{"not an object", file(`["a"]`, 0), ErrFormat},
		{"leading space", file(" "+ok, 8), ErrFormat},
		{"bad json", file(`{"a":{`, 0), ErrFormat},
		{"unknown dtype", file(`{"a":{"dtype":"F3","shape":[2],"data_offsets":[0,8]}}`, 8), ErrFormat},
		{"missing offsets", file(`{"a":{"dtype":"F32","shape":[2]}}`, 8), ErrFormat},
		{"shape mismatch", file(`{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, 8), ErrFormat},
		{"negative dim", file(`{"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,-8]}}`, 0), ErrFormat},
		{"hole", file(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}`, 3), ErrFormat},
		{"overlap", file(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}`, 3), ErrFormat},
		{"empty name", file(`{"":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1), ErrFormat},
		{"duplicate", file(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, 2), ErrFormat},
		{"metadata not strings", file(`{"__metadata__":{"k":1}}`, 0), ErrFormat},
		{"overflow", file(`{"a":{"dtype":"F64","shape":[4611686018427387904,4],"data_offsets":[0,0]}}`, 0), ErrFormat},
		{"garbage after object", file(`{}x`, 0), ErrFormat},
		{"huge prefix", binary.LittleEndian.AppendUint64(nil, 1<<62), ErrFormat},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := Read(bytes.NewReader(c.file), int64(len(c.file)))
			if !errors.Is(err, c.want) {
				t.Fatalf("error %v, want %v", err, c.want)
			}
		})
	}
	// Padding with spaces is allowed, and an empty file of tensors is valid.
	for _, js := range []string{ok + "   ", `{}`} {
		f := file(js, 0)
		if js != `{}` {
			f = file(js, 8)
		}
		if _, _, err := Read(bytes.NewReader(f), int64(len(f))); err != nil {
			t.Fatalf("%q: %v", js, err)
		}
	}
}

func TestEncodeInvalid(t *testing.T) {
	for _, specs := range [][]Spec{
		{{Name: "", DType: F32}},
		{{Name: "__metadata__", DType: F32}},
		{{Name: "a", DType: F32}, {Name: "a", DType: F32}},
		{{Name: "a", DType: "X"}},
		{{Name: "a", DType: F32, Shape: []int{-1}}},
	} {
		if _, _, err := Encode(specs, nil); !errors.Is(err, ErrFormat) {
			t.Errorf("Encode(%v) error %v, want ErrFormat", specs, err)
		}
	}
}

// FuzzParse checks that Parse never panics and that whatever it accepts
// re-encodes to a header describing the same tensors.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`))
	f.Add([]byte(`{"__metadata__":{"x":"y"},"b":{"dtype":"BF16","shape":[],"data_offsets":[0,2]}}  `))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, js []byte) {
		h, err := Parse(js)
		if err != nil {
			return
		}
		specs := make([]Spec, len(h.Tensors))
		for i, tn := range h.Tensors {
			specs[i] = Spec{Name: tn.Name, DType: tn.DType, Shape: tn.Shape}
		}
		h2, _, err := Encode(specs, h.Metadata)
		if err != nil {
			t.Fatalf("accepted header does not re-encode: %v", err)
		}
		for i, tn := range h.Tensors {
			u := h2.Tensors[i]
			if u.Begin != tn.Begin || u.End != tn.End {
				t.Fatalf("tensor %q at [%d, %d], re-encoded at [%d, %d]", tn.Name, tn.Begin, tn.End, u.Begin, u.End)
			}
		}
	})
}
