package shard

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// Field is one named property of a configuration that all ranks must agree on.
type Field struct {
	Name  string
	Value string
}

// Fields describes the layout as named properties: the inputs that decide it
// (world size, options, the parameter list) and a digest of each aspect, so
// that a mismatch between two ranks can be named.
func (l *Layout) Fields() []Field {
	names := sha256.New()
	shapes := sha256.New()
	kinds := sha256.New()
	for _, p := range l.Params {
		fmt.Fprintf(names, "%q\n", p.Name)
		fmt.Fprintf(shapes, "%q%v\n", p.Name, p.Shape)
		fmt.Fprintf(kinds, "%q%t\n", p.Name, p.HighPrecision)
	}
	short := func(h []byte) string { return hex.EncodeToString(h[:8]) }
	fs := []Field{
		{"world size", fmt.Sprint(l.World)},
		{"parameter count", fmt.Sprint(len(l.Params))},
		{"parameter elements", fmt.Sprint(l.TotalElements())},
		{"bucket elements", fmt.Sprint(l.Options.BucketElements)},
		{"alignment", fmt.Sprint(l.Options.Align)},
		{"bucket count", fmt.Sprint(len(l.Buckets))},
		{"parameter names", short(names.Sum(nil))},
		{"parameter shapes", short(shapes.Sum(nil))},
		{"high-precision marks", short(kinds.Sum(nil))},
	}
	if a := l.Options.HighPrecisionAlign; a != 0 && a != HighPrecisionAlign {
		// only when changed: the fingerprints of layouts made before the
		// option existed stay the same
		fs = append(fs, Field{"high-precision alignment", fmt.Sprint(a)})
	}
	return fs
}

// Fingerprint is a digest of everything that decides the layout. Two layouts
// with equal fingerprints are identical.
func (l *Layout) Fingerprint() string { return FingerprintFields(l.Fields()) }

// FingerprintFields digests a list of fields.
func FingerprintFields(fs []Field) string {
	h := sha256.New()
	for _, f := range fs {
		fmt.Fprintf(h, "%q=%q\n", f.Name, f.Value)
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// EncodeFields serialises fields for exchange between ranks.
func EncodeFields(fs []Field) []byte {
	var b strings.Builder
	for _, f := range fs {
		fmt.Fprintf(&b, "%q=%q\n", f.Name, f.Value)
	}
	return []byte(b.String())
}

// DecodeFields parses the output of EncodeFields.
func DecodeFields(data []byte) ([]Field, error) {
	var fs []Field
	for _, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if line == "" {
			continue
		}
		var name, value string
		if _, err := fmt.Sscanf(line, "%q=%q", &name, &value); err != nil {
			return nil, fmt.Errorf("shard: malformed field line %q: %w", line, err)
		}
		fs = append(fs, Field{name, value})
	}
	return fs, nil
}

// DiffFields describes how b differs from a ("" when they agree), naming each
// field whose value differs or that only one side has.
func DiffFields(a, b []Field) string {
	am := make(map[string]string, len(a))
	for _, f := range a {
		am[f.Name] = f.Value
	}
	bm := make(map[string]bool, len(b))
	var diffs []string
	for _, f := range b {
		bm[f.Name] = true
		if v, ok := am[f.Name]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s only on one side (%s)", f.Name, f.Value))
		} else if v != f.Value {
			diffs = append(diffs, fmt.Sprintf("%s: %s vs %s", f.Name, v, f.Value))
		}
	}
	for _, f := range a {
		if !bm[f.Name] {
			diffs = append(diffs, fmt.Sprintf("%s only on one side (%s)", f.Name, f.Value))
		}
	}
	return strings.Join(diffs, "; ")
}
