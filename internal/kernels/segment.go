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
		t.Chunks += (s.Len + ChunkElements - 1) / ChunkElements
	}
	return t
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
