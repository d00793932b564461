package kernels

import (
	"math/rand/v2"
	"testing"

	"github.com/distopt/distopt/fp8"
)

// updateChunkElements lists the elements (relative to the segment's first)
// that update.cu's thread block gives chunk k of segment s, as that kernel
// computes them: a run of ChunkElements from the head or the tail (cut at
// the part's end), or a band chunk of bandRows x 128 elements with rows
// s.Cols apart. It is written from the kernel's code, apart from bandSplit.
func updateChunkElements(s Segment, k int) []int {
	head, bands, _ := bandSplit(s)
	headChunks := (head + ChunkElements - 1) / ChunkElements
	bandChunks := bands / ChunkElements
	var out []int
	run := func(rel0, lim int) {
		for rel := rel0; rel < min(rel0+ChunkElements, lim); rel++ {
			out = append(out, rel)
		}
	}
	switch {
	case k < headChunks:
		run(k*ChunkElements, head)
	case k < headChunks+bandChunks:
		j := k - headChunks
		strips := s.Cols / 128
		rel0 := head + j/strips*bandRows*s.Cols + j%strips*128
		for r := range bandRows {
			for c := range 128 {
				out = append(out, rel0+r*s.Cols+c)
			}
		}
	default:
		run(head+bands+(k-headChunks-bandChunks)*ChunkElements, s.Len)
	}
	return out
}

// TestBandChunks checks the chunking of tile segments that Update and
// PackSegments agree on (bandSplit, segmentChunks): over the chunks
// segmentChunks counts, every element of the segment comes exactly once;
// every band chunk lies in one 128x128 tile and loads as vectors when the
// segment does (its elements 4-aligned in the shard); and segments the
// bands do not apply to keep the plain count. Matrices of 128 to 8192
// columns; segments from anywhere in the matrix, of any length.
func TestBandChunks(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	banded := 0
	for trial := range 3000 {
		cols := 128 * (1 + r.IntN(64))
		if trial%5 == 0 {
			cols = 1 + r.IntN(9000) // mostly not a multiple of 128
		}
		rows := 1 + r.IntN(300)
		po := r.IntN(rows * cols)
		n := 1 + r.IntN(rows*cols-po)
		s := Segment{Off: r.IntN(9), Len: n, Mode: ModeTile, ParamOffset: po, Cols: cols}
		if trial%4 != 0 { // aligned in the shard as in the matrix, as bands need
			s.Off = po%4 + 4*r.IntN(3)
		}
		if trial%7 == 0 {
			s.Mode = ModeTensorCurrent
		}
		chunks := segmentChunks(s)
		head, bands, tail := bandSplit(s)
		if head+bands+tail != n || head < 0 || bands < 0 || tail < 0 {
			t.Fatalf("%+v: head %d + bands %d + tail %d != %d", s, head, bands, tail, n)
		}
		if bands > 0 {
			banded++
		} else if chunks != (n+ChunkElements-1)/ChunkElements {
			t.Fatalf("%+v: no bands, %d chunks, want %d", s, chunks, (n+ChunkElements-1)/ChunkElements)
		}
		seen := make([]bool, n)
		for k := range chunks {
			els := updateChunkElements(s, k)
			if len(els) == 0 {
				t.Fatalf("%+v: chunk %d of %d is empty", s, k, chunks)
			}
			inBand := k >= (head+ChunkElements-1)/ChunkElements && k < (head+ChunkElements-1)/ChunkElements+bands/ChunkElements
			for _, e := range els {
				if e < 0 || e >= n || seen[e] {
					t.Fatalf("%+v: chunk %d: element %d out of range or seen twice", s, k, e)
				}
				seen[e] = true
				if inBand && fp8.TileIndex(po+e, cols, 128) != fp8.TileIndex(po+els[0], cols, 128) {
					t.Fatalf("%+v: band chunk %d spans tiles", s, k)
				}
			}
			if inBand && (s.Off+els[0])%4 != 0 {
				t.Fatalf("%+v: band chunk %d starts at shard element %d, not 4-aligned", s, k, s.Off+els[0])
			}
		}
		for e, ok := range seen {
			if !ok {
				t.Fatalf("%+v: element %d in no chunk", s, e)
			}
		}
	}
	if banded < 300 {
		t.Errorf("only %d of 3000 segments had bands", banded)
	}
}
