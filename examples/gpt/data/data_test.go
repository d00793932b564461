package data

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestRoundTrip checks that Decode(Encode(x)) == x for every byte value
// and for invalid UTF-8, and that Decode rejects tokens outside the
// vocabulary.
func TestRoundTrip(t *testing.T) {
	all := make([]byte, 0, 2*256)
	for i := range 256 {
		all = append(all, byte(i), byte(255-i))
	}
	for _, text := range [][]byte{nil, []byte("func main() {}\n// héllo"), all, {0xff, 0xfe, 0xc3}} {
		got, err := Decode(Encode(text))
		if err != nil || !bytes.Equal(got, text) {
			t.Fatalf("round trip of %q: %q, %v", text, got, err)
		}
	}
	if _, err := Decode([]uint16{65, Vocab}); err == nil {
		t.Fatal("Decode accepted a token outside the vocabulary")
	}
}

// writeTree makes a small corpus: files in several directories, some with
// extensions the corpus skips, one in testdata, one holding a NUL.
func writeTree(t *testing.T, root string) map[string]string {
	t.Helper()
	taken := map[string]string{}
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		rel := filepath.Join("pkg"+string(rune('a'+i%7)), "f"+string(rune('a'+i%26))+string(rune('a'+i/26))+".go")
		body := make([]byte, 1+r.IntN(300))
		for j := range body {
			body[j] = byte(1 + r.IntN(255))
		}
		taken[filepath.ToSlash(rel)] = string(body)
		mustWrite(t, filepath.Join(root, rel), body)
	}
	mustWrite(t, filepath.Join(root, "pkga", "image.png"), []byte("PNG"))
	mustWrite(t, filepath.Join(root, "pkga", "testdata", "x.go"), []byte("package x"))
	mustWrite(t, filepath.Join(root, "pkgb", "nul.go"), []byte("a\x00b"))
	return taken
}

func mustWrite(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSplit checks, on a tree whose files are known, that every taken
// file lands in exactly one split, whole and in path order, that the
// split follows IsValid, and that the token files read back equal.
func TestSplit(t *testing.T) {
	root, out := t.TempDir(), t.TempDir()
	taken := writeTree(t, root)
	meta, err := Prepare(root, out, nil)
	if err != nil {
		t.Fatal(err)
	}
	paths := make([]string, 0, len(taken))
	for p := range taken {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	var wantTrain, wantValid []byte
	for _, p := range paths {
		if IsValid(p) {
			wantValid = append(append(wantValid, taken[p]...), 0)
		} else {
			wantTrain = append(append(wantTrain, taken[p]...), 0)
		}
	}
	if len(wantValid) == 0 || len(wantTrain) == 0 {
		t.Fatal("the test tree puts no file in one of the splits; change its names")
	}
	for _, c := range []struct {
		file string
		want []byte
	}{{TrainFile, wantTrain}, {ValidFile, wantValid}} {
		vocab, toks, err := ReadTokens(filepath.Join(out, c.file))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := Decode(toks)
		if vocab != Vocab || !bytes.Equal(got, c.want) {
			t.Errorf("%s: vocab %d, %d bytes, want %d bytes equal to the files in path order", c.file, vocab, len(got), len(c.want))
		}
	}
	if meta.Skipped != 1 || meta.Train.Files+meta.Valid.Files != len(taken) {
		t.Errorf("meta %+v: want 1 skipped file and %d taken", meta, len(taken))
	}
	// Determinism: a second run on the same tree gives the same digests.
	again, err := Prepare(root, t.TempDir(), nil)
	if err != nil || again.Train.SHA256 != meta.Train.SHA256 || again.Valid.SHA256 != meta.Valid.SHA256 {
		t.Errorf("second run: %+v, %v; first %+v", again, err, meta)
	}
}

// TestReadTokensRejects checks the errors of ReadTokens on damaged files.
func TestReadTokensRejects(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.tok")
	if err := WriteTokens(good, 10, []uint16{1, 2, 9}); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(good)
	bad := map[string][]byte{
		"short":      raw[:10],
		"magic":      append([]byte("XXXXXXXX"), raw[8:]...),
		"truncated":  raw[:len(raw)-1],
		"vocabulary": append(slices.Clone(raw[:len(raw)-2]), 10, 0),
	}
	for name, b := range bad {
		p := filepath.Join(dir, name)
		mustWrite(t, p, b)
		if _, _, err := ReadTokens(p); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestLoaderPartition checks that the ranks of a step take disjoint
// blocks of the step's sequences whose union is the step's sequences of a
// single rank with the same global batch, and that a batch depends only
// on (step, rank, micro).
func TestLoaderPartition(t *testing.T) {
	toks := make([]uint16, 5000)
	for i := range toks {
		toks[i] = uint16(i % Vocab)
	}
	one := Loader{Tokens: toks, Seq: 16, Batch: 8, World: 1, MicroBatches: 3, Seed: 7}
	four := Loader{Tokens: toks, Seq: 16, Batch: 2, World: 4, MicroBatches: 3, Seed: 7}
	for _, l := range []Loader{one, four} {
		if err := l.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	for step := range 3 {
		want := map[uint64]int{}
		for m := range one.MicroBatches {
			for b := range one.Batch {
				want[one.Index(step, 0, m, b)]++
			}
		}
		got := map[uint64]int{}
		for r := range four.World {
			for m := range four.MicroBatches {
				for b := range four.Batch {
					got[four.Index(step, r, m, b)]++
				}
			}
		}
		for g, n := range got {
			if n != 1 || want[g] != 1 || g/uint64(one.Global()) != uint64(step) {
				t.Fatalf("step %d: sequence %d taken %d times by the ranks, %d times by one rank", step, g, n, want[g])
			}
		}
		if len(got) != len(want) {
			t.Fatalf("step %d: %d sequences over 4 ranks, %d on one", step, len(got), len(want))
		}
	}
	in, tg := make([]int32, 2*16), make([]int32, 2*16)
	in2, tg2 := make([]int32, 2*16), make([]int32, 2*16)
	four.MicroBatch(in, tg, 5, 2, 1)
	four.MicroBatch(in2, tg2, 5, 2, 1)
	if !slices.Equal(in, in2) || !slices.Equal(tg, tg2) {
		t.Fatal("the same (step, rank, micro) gave different batches")
	}
	for i := range 2 {
		for j := range 15 {
			if tg[i*16+j] != in[i*16+j+1] {
				t.Fatalf("targets are not the inputs shifted by one at row %d, column %d", i, j)
			}
		}
	}
}

// TestLoaderOffsets checks Offset against the formula written out with
// 64-bit wrap-around, and that offsets cover the token range.
func TestLoaderOffsets(t *testing.T) {
	l := Loader{Tokens: make([]uint16, 1000), Seq: 10, Batch: 1, World: 1, MicroBatches: 1, Seed: 3}
	seen := map[int]bool{}
	for g := range uint64(20000) {
		x := l.Seed + g*0x9E3779B97F4A7C15
		x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
		x = (x ^ (x >> 27)) * 0x94d049bb133111eb
		x ^= x >> 31
		off := l.Offset(g)
		if off != int(x%990) {
			t.Fatalf("Offset(%d) = %d, want %d", g, off, x%990)
		}
		seen[off] = true
	}
	if len(seen) != 990 {
		t.Errorf("20000 draws covered %d of 990 offsets", len(seen))
	}
}

// TestValidWindows checks that validation windows tile the split.
func TestValidWindows(t *testing.T) {
	valid := make([]uint16, 101)
	for i := range valid {
		valid[i] = uint16(i)
	}
	n := ValidWindows(valid, 10)
	if n != 10 {
		t.Fatalf("%d windows, want 10", n)
	}
	in, tg := make([]int32, 10), make([]int32, 10)
	for k := range n {
		Window(in, tg, valid, 10, k)
		if in[0] != int32(10*k) || tg[9] != int32(10*k+10) {
			t.Fatalf("window %d: %v -> %v", k, in, tg)
		}
	}
}

// TestEvalWindows checks the evaluation windows: spread, for counts that
// divide the total and counts that do not (192 of 12,400 is the 124M
// runs' shape), they start at window 0, increase by ⌊total/count⌋ or
// ⌈total/count⌉ (so no part of the split is skipped more than that) and
// end within one stride of the split's end; a count equal to the total
// takes every window; without spread they are the first count; the same
// arguments give the same windows; counts outside [1, total] are refused.
func TestEvalWindows(t *testing.T) {
	for _, c := range []struct{ count, total int }{{192, 12400}, {4, 10}, {10, 10}, {1, 7}, {3, 1000}, {200, 201}} {
		ks, err := EvalWindows(c.count, c.total, true)
		if err != nil {
			t.Fatal(err)
		}
		lo, hi := c.total/c.count, (c.total+c.count-1)/c.count
		if len(ks) != c.count || ks[0] != 0 || ks[c.count-1] < c.total-hi || ks[c.count-1] >= c.total {
			t.Errorf("%+v: %d windows from %d to %d, want %d from 0 to within %d of %d", c, len(ks), ks[0], ks[len(ks)-1], c.count, hi, c.total)
		}
		for j := 1; j < len(ks); j++ {
			if d := ks[j] - ks[j-1]; d < lo || d > hi {
				t.Fatalf("%+v: window %d is %d after window %d, want %d to %d", c, ks[j], d, ks[j-1], lo, hi)
			}
		}
		again, _ := EvalWindows(c.count, c.total, true)
		if !slices.Equal(ks, again) {
			t.Errorf("%+v: two calls gave different windows", c)
		}
		first, err := EvalWindows(c.count, c.total, false)
		if err != nil || len(first) != c.count || first[0] != 0 || first[c.count-1] != c.count-1 {
			t.Errorf("%+v without spread: %v, %v; want the first %d windows", c, first, err, c.count)
		}
	}
	for _, c := range []struct{ count, total int }{{0, 10}, {11, 10}, {-1, 10}, {1, 0}} {
		if _, err := EvalWindows(c.count, c.total, true); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}
