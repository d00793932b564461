package checkpoint

import (
	"errors"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/optimizertest"
	"github.com/distopt/distopt/safetensors"
)

// TestReadRequests reads element ranges of a shard file: the values equal
// those written, bytes in chunks no request touches are never read (a
// corruption there goes unnoticed), and a corruption in a chunk a request
// touches fails with ErrChecksum, even outside the requested bytes.
func TestReadRequests(t *testing.T) {
	const n, chunk = 10000, 256
	r := rand.New(rand.NewPCG(3, 4))
	vals := func() []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		return v
	}
	pieces := []optimizer.PieceState{{Param: "p", Offset: 0, Master: vals(), M: vals(), V: vals()}}
	// Moments as bfloat16: round them first, as the optimizer holds them.
	for _, v := range [][]float32{pieces[0].M, pieces[0].V} {
		b := make([]byte, 2*n)
		encodeValues(b, v, safetensors.BF16)
		decodeValues(v, b, safetensors.BF16)
	}
	dir := t.TempDir()
	rec, err := writeShard(dir, 0, 1, 0, chunk, buffer.BFloat16, []string{"m", "v"}, pieces, nil)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, rec.Name)
	read := func(from, count int) ([]float32, []float32, error) {
		s, err := openShard(dir, rec)
		if err != nil {
			return nil, nil, err
		}
		defer s.Close()
		master, v := make([]float32, count), make([]float32, count)
		tm, _ := s.tensor("p@0/master", safetensors.F32, n)
		tv, _ := s.tensor("p@0/v", safetensors.BF16, n)
		reqs := []request{
			{begin: tv.Begin + 2*int64(from), end: tv.Begin + 2*int64(from+count), dt: safetensors.BF16, dst: v},
			{begin: tm.Begin + 4*int64(from), end: tm.Begin + 4*int64(from+count), dt: safetensors.F32, dst: master},
		}
		return master, v, readRequests(s, reqs)
	}
	for _, c := range []struct{ from, count int }{{0, n}, {1000, 100}, {63, 1}, {n - 1, 1}, {64, 64}} {
		master, v, err := read(c.from, c.count)
		if err != nil {
			t.Fatal(err)
		}
		if i := optimizertest.FirstDiff(master, pieces[0].Master[c.from:c.from+c.count]); i >= 0 {
			t.Fatalf("master [%d, +%d) differs at %d", c.from, c.count, i)
		}
		if i := optimizertest.FirstDiff(v, pieces[0].V[c.from:c.from+c.count]); i >= 0 {
			t.Fatalf("v [%d, +%d) differs at %d", c.from, c.count, i)
		}
	}
	// Masters [1000, 1100) are data bytes [4000, 4400): chunks 15 to 17.
	off := dataOffset(t, path)
	flip(t, path, off+10000) // chunk 39: not read
	if _, _, err := read(1000, 100); err != nil {
		t.Fatalf("a corruption outside the chunks read: %v", err)
	}
	flip(t, path, off+3850) // chunk 15, before the first byte requested
	if _, _, err := read(1000, 100); !errors.Is(err, ErrChecksum) {
		t.Fatalf("a corruption inside a chunk read: %v, want ErrChecksum", err)
	}
}
