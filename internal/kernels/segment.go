package kernels

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/distopt/distopt/internal/cuda"
)

// ChunkElements is the number of elements a thread block of the segment
// kernels (Update, CastSegments) takes at a time; chunks are counted from
// each segment's first element.
const ChunkElements = 4096

// segmentBytes is the size of one packed Segment (struct Seg of
// segments.cuh).
const segmentBytes = 64

// shardBytes is the size of one packed Shard (struct ShardBufs of
// segments.cuh).
const shardBytes = 80

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
// matrix of Cols columns. In a table over several shards (PackShards),
// Shard is the index of the segment's shard.
type Segment struct {
	Off, Len          int
	Mode, Slot        uint32
	StepSize, Decay   float32
	ParamOffset, Cols int
	Shard             uint32
}

// Shard is the buffers of one shard of a launch over several (PackShards):
// what UpdateLaunch and CastSegments otherwise take for the whole launch.
// Out is the shard's FP8 bytes, or the bfloat16 or float32 copy of a
// high-precision shard (a shard has one or the other); MomentBase and
// MomentSeed are UpdateLaunch's for this shard.
type Shard struct {
	Master, M, V, Grad, Out, BlockScales, MScales, VScales cuda.DevicePtr
	MomentBase                                             uint64
	MomentSeed                                             uint32
}

// Table is a packed segment table: the bytes to upload, the number of
// segments in it and the number of chunks they cover; in a table over
// several shards, the number of shards whose buffers follow the segments.
type Table struct {
	Bytes  []byte
	Segs   int
	Chunks int
	Tiles  bool // some segment is of ModeTile (Update then launches its _tiles kernel)
	Shards int  // 0: one shard, the launch's own buffers
}

// PackSegments packs the non-empty segments of segs, in order, with the
// index of each one's first chunk, as the kernels read them (64 bytes per
// segment, little endian).
func PackSegments(segs []Segment) Table {
	t := Table{Bytes: make([]byte, 0, len(segs)*segmentBytes)}
	for _, s := range segs {
		t.add(s)
	}
	return t
}

// add appends s to t unless it is empty.
func (t *Table) add(s Segment) {
	if s.Len <= 0 {
		return
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
	le.PutUint32(b[56:], s.Shard)
	t.Bytes = append(t.Bytes, b[:]...)
	t.Segs++
	t.Chunks += segmentChunks(s)
	t.Tiles = t.Tiles || s.Mode == ModeTile
}

// PackShards packs the non-empty segments of several shards into one
// table, shard k's segments segs[k] (their Shard fields set to k) in order,
// followed by the buffers of every shard (80 bytes each): one Update or
// CastSegments launch then covers all of them, each chunk reading and
// writing its own shard's buffers. segs and shards have the same length.
func PackShards(segs [][]Segment, shards []Shard) (Table, error) {
	if len(segs) != len(shards) {
		return Table{}, fmt.Errorf("kernels: %d segment lists for %d shards", len(segs), len(shards))
	}
	n := 0
	for _, ss := range segs {
		n += len(ss)
	}
	// sized once: the table is packed every step (its factors change), and
	// growing it by appends cost more than the rest of the packing
	t := Table{Bytes: make([]byte, 0, n*segmentBytes+len(shards)*shardBytes)}
	for k, ss := range segs {
		for _, s := range ss {
			s.Shard = uint32(k)
			t.add(s)
		}
	}
	for _, sh := range shards {
		var b [shardBytes]byte
		le := binary.LittleEndian
		for i, p := range []cuda.DevicePtr{sh.Master, sh.M, sh.V, sh.Grad, sh.Out, sh.BlockScales, sh.MScales, sh.VScales} {
			le.PutUint64(b[8*i:], uint64(p))
		}
		le.PutUint64(b[64:], sh.MomentBase)
		le.PutUint32(b[72:], sh.MomentSeed)
		t.Bytes = append(t.Bytes, b[:]...)
	}
	t.Shards = len(shards)
	return t, nil
}

// SetFactors sets the factors StepSize and Decay of segment i of t (the
// i-th packed, empty segments skipped) and reports whether they changed.
// A planned table is packed once and takes each step's factors so.
func (t *Table) SetFactors(i int, step, decay float32) bool {
	b := t.Bytes[i*segmentBytes+48 : i*segmentBytes+56]
	s, d := math.Float32bits(step), math.Float32bits(decay)
	le := binary.LittleEndian
	if le.Uint32(b) == s && le.Uint32(b[4:]) == d {
		return false
	}
	le.PutUint32(b, s)
	le.PutUint32(b[4:], d)
	return true
}

// SetSeed sets the MomentSeed of shard k of a table from PackShards and
// reports whether it changed.
func (t *Table) SetSeed(k int, seed uint32) bool {
	b := t.Bytes[t.Segs*segmentBytes+k*shardBytes+72:][:4]
	if binary.LittleEndian.Uint32(b) == seed {
		return false
	}
	binary.LittleEndian.PutUint32(b, seed)
	return true
}

// momentBases returns the MomentBase of every shard of a table from
// PackShards.
func (t *Table) momentBases() []uint64 {
	out := make([]uint64, t.Shards)
	off := t.Segs * segmentBytes
	for k := range out {
		out[k] = binary.LittleEndian.Uint64(t.Bytes[off+k*shardBytes+64:])
	}
	return out
}

// shardsPtr returns where the shard buffers of t lie when t is uploaded at
// p (0 for a table of one shard).
func (t *Table) shardsPtr(p cuda.DevicePtr) cuda.DevicePtr {
	if t.Shards == 0 || p == 0 {
		return 0
	}
	return p.Add(t.Segs * segmentBytes)
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

// SameStatic reports whether b, the bytes of a table of the same layout,
// has t's static part: StaticPart(t) == StaticPart(b), compared in place
// (no copy; a step's table lookup finds the table it used last this way).
func (t *Table) SameStatic(b []byte) bool {
	if len(b) != len(t.Bytes) {
		return false
	}
	a := t.Bytes
	for i := 0; i < t.Segs; i++ {
		o := i * segmentBytes
		if !bytes.Equal(a[o:o+48], b[o:o+48]) || !bytes.Equal(a[o+56:o+segmentBytes], b[o+56:o+segmentBytes]) {
			return false
		}
	}
	for k := 0; k < t.Shards; k++ {
		o := t.Segs*segmentBytes + k*shardBytes
		if !bytes.Equal(a[o:o+72], b[o:o+72]) || !bytes.Equal(a[o+76:o+shardBytes], b[o+76:o+shardBytes]) {
			return false
		}
	}
	return true
}

// StaticPart returns a copy of t's bytes with what changes from one step
// to the next zeroed: the per-step factors (StepSize and Decay) of every
// segment and the moment seed of every shard (backend.MomentSeed draws one
// per step; optimizer/gpu packs it only where a kernel reads it, an FP8
// second moment). The rest, the shards' buffers included, stays.
func (t *Table) StaticPart() []byte {
	out := append([]byte(nil), t.Bytes...)
	for i := 0; i < t.Segs; i++ {
		clear(out[i*segmentBytes+48 : i*segmentBytes+56])
	}
	for k := 0; k < t.Shards; k++ {
		o := t.Segs*segmentBytes + k*shardBytes + 72
		clear(out[o : o+4])
	}
	return out
}
