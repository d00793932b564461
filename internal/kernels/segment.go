package kernels

import (
	"encoding/binary"
	"math"
)

// ChunkElements is the number of elements a thread block of the segment
// kernels (Update, CastSegments) takes at a time; chunks are counted from
// each segment's first element.
const ChunkElements = 4096

// segmentBytes is the size of one packed Segment (struct Seg of
// segments.cuh).
const segmentBytes = 56

// Segment modes, the values of optimizer.Mode.
const (
	ModeHighPrecision uint32 = iota + 1
	ModeTensorCurrent
	ModeTensorDelayed
	ModeBlock
	ModeTile
)

// Segment is one run of a shard as the segment kernels read it: elements
// [Off, Off+Len) with mode Mode, slot Slot, the rule's factors StepSize and
// Decay, and (ModeTile) the flat index ParamOffset of its first element in a
// matrix of Cols columns.
type Segment struct {
	Off, Len          int
	Mode, Slot        uint32
	StepSize, Decay   float32
	ParamOffset, Cols int
}

// Table is a packed segment table: the bytes to upload, the number of
// segments in it and the number of chunks they cover.
type Table struct {
	Bytes  []byte
	Segs   int
	Chunks int
	Tiles  bool // some segment is of ModeTile (Update then launches its _tiles kernel)
}

// PackSegments packs the non-empty segments of segs, in order, with the
// index of each one's first chunk, as the kernels read them (56 bytes per
// segment, little endian).
func PackSegments(segs []Segment) Table {
	var t Table
	for _, s := range segs {
		if s.Len <= 0 {
			continue
		}
		var b [segmentBytes]byte
		le := binary.LittleEndian
		le.PutUint64(b[0:], uint64(s.Off))
		le.PutUint64(b[8:], uint64(s.Len))
		le.PutUint64(b[16:], uint64(t.Chunks))
		le.PutUint64(b[24:], uint64(s.ParamOffset))
		le.PutUint64(b[32:], uint64(s.Cols))
		le.PutUint32(b[40:], s.Mode)
		le.PutUint32(b[44:], s.Slot)
		le.PutUint32(b[48:], math.Float32bits(s.StepSize))
		le.PutUint32(b[52:], math.Float32bits(s.Decay))
		t.Bytes = append(t.Bytes, b[:]...)
		t.Segs++
		t.Chunks += segmentChunks(s)
		t.Tiles = t.Tiles || s.Mode == ModeTile
	}
	return t
}

// bandRows is BAND_ROWS of segments.cuh: the rows of a band, the unit in
// which Update takes the whole rows of a ModeTile segment (ChunkElements/128
// rows of 128 columns per chunk, so that a chunk lies in one tile).
const bandRows = ChunkElements / 128

// bandSplit is band_split of segments.cuh: the elements of s before its
// first band (head), in its bands and after them (tail). A segment without
// bands (not ModeTile; columns not a multiple of 128; Off and ParamOffset
// not alike modulo 4; no whole band) is all head.
func bandSplit(s Segment) (head, bands, tail int) {
	if s.Mode != ModeTile || s.Cols%128 != 0 || (s.Off-s.ParamOffset)%4 != 0 {
		return s.Len, 0, 0
	}
	band := bandRows * s.Cols
	b0 := (s.ParamOffset + band - 1) / band * band
	b1 := (s.ParamOffset + s.Len) / band * band
	if b1 <= b0 {
		return s.Len, 0, 0
	}
	head, bands = b0-s.ParamOffset, b1-b0
	return head, bands, s.Len - head - bands
}

// segmentChunks is the number of chunks of s: those of its head and tail
// (ChunkElements each, the last one partial) and of its bands (whole).
// CastSegments takes every segment as a head; chunks past its end do
// nothing there.
func segmentChunks(s Segment) int {
	head, bands, tail := bandSplit(s)
	ceil := func(n int) int { return (n + ChunkElements - 1) / ChunkElements }
	return ceil(head) + bands/ChunkElements + ceil(tail)
}

// StaticPart returns a copy of packed table bytes with the per-step factors
// (StepSize and Decay) of every segment zeroed: what stays the same from one
// step to the next.
func StaticPart(table []byte) []byte {
	out := append([]byte(nil), table...)
	for i := 0; i+segmentBytes <= len(out); i += segmentBytes {
		clear(out[i+48 : i+56])
	}
	return out
}
