package kernels

import (
	"bytes"
	"encoding/binary"
	"slices"
	"strings"
	"testing"

	"github.com/distopt/distopt/internal/cuda"
)

// TestStaticPart checks that two tables differing only in their per-step
// factors have the same static part, and tables differing in anything else
// do not.
func TestStaticPart(t *testing.T) {
	base := []Segment{{Off: 0, Len: 5000, Mode: ModeTensorCurrent, Slot: 1, StepSize: 1e-3, Decay: 0.99}, {Off: 5120, Len: 7, Mode: ModeTile, Slot: 4, StepSize: 2e-3, Decay: 1, ParamOffset: 3, Cols: 9}}
	later := []Segment{base[0], base[1]}
	later[0].StepSize, later[1].Decay = 5e-4, 0.5
	other := []Segment{base[0], base[1]}
	other[1].Slot = 5
	a, b, c := PackSegments(base), PackSegments(later), PackSegments(other)
	if bytes.Equal(a.Bytes, b.Bytes) {
		t.Fatal("tables with other factors pack the same")
	}
	if !bytes.Equal(a.StaticPart(), b.StaticPart()) {
		t.Fatal("static parts differ for tables that differ only in factors")
	}
	if bytes.Equal(a.StaticPart(), c.StaticPart()) {
		t.Fatal("static parts agree for tables with different slots")
	}
	if bytes.Equal(a.StaticPart(), a.Bytes) || len(a.StaticPart()) != len(a.Bytes) {
		t.Fatal("StaticPart did not clear the factors")
	}
}

// TestPackShards checks the table of a launch over several shards: each
// shard's segments in order with their shard index and chunks counted
// across shards as PackSegments counts them, then the shards' buffers;
// StaticPart clears the factors but keeps the buffers; a launch checks
// every shard's MomentBase.
func TestPackShards(t *testing.T) {
	segs := [][]Segment{
		{{Off: 0, Len: 5000, Mode: ModeTensorCurrent, StepSize: 1e-3, Decay: 0.9}, {Off: 5000, Len: 0}},
		{{Off: 8, Len: 4097, Mode: ModeHighPrecision, StepSize: 2e-3, Decay: 1}},
		{{Off: 0, Len: 1, Mode: ModeBlock}, {Off: 128, Len: 3, Mode: ModeBlock, StepSize: 5}},
	}
	shards := make([]Shard, 3)
	for k := range shards { // every field distinct, so that a swap shows
		p := func(i int) cuda.DevicePtr { return cuda.DevicePtr(0x10000*(k+1) + 0x100*i) }
		shards[k] = Shard{Master: p(0), M: p(1), V: p(2), Grad: p(3), Out: p(4), BlockScales: p(5), MScales: p(6), VScales: p(7),
			MomentBase: uint64(4 * (k + 1)), MomentSeed: uint32(7 + k)}
	}
	tab, err := PackShards(segs, shards)
	if err != nil {
		t.Fatal(err)
	}
	var flat []Segment
	for k, ss := range segs {
		for _, s := range ss {
			s.Shard = uint32(k)
			flat = append(flat, s)
		}
	}
	one := PackSegments(flat)
	if tab.Segs != one.Segs || tab.Chunks != one.Chunks || tab.Shards != 3 {
		t.Fatalf("table: %d segments, %d chunks, %d shards; want %d, %d, 3", tab.Segs, tab.Chunks, tab.Shards, one.Segs, one.Chunks)
	}
	if !bytes.Equal(tab.Bytes[:tab.Segs*segmentBytes], one.Bytes) {
		t.Error("the segments of a table over shards differ from PackSegments' with the shard indices")
	}
	if got := len(tab.Bytes) - tab.Segs*segmentBytes; got != 3*shardBytes {
		t.Fatalf("%d bytes of shard buffers, want %d", got, 3*shardBytes)
	}
	for k, sh := range shards {
		b := tab.Bytes[tab.Segs*segmentBytes+k*shardBytes:]
		// the offsets of struct ShardBufs (segments.cuh asserts them too)
		for i, want := range []cuda.DevicePtr{sh.Master, sh.M, sh.V, sh.Grad, sh.Out, sh.BlockScales, sh.MScales, sh.VScales} {
			if p := binary.LittleEndian.Uint64(b[8*i:]); p != uint64(want) {
				t.Errorf("shard %d: pointer %d is %#x, want %#x", k, i, p, want)
			}
		}
		if base := binary.LittleEndian.Uint64(b[64:]); base != sh.MomentBase {
			t.Errorf("shard %d: base %d, want %d", k, base, sh.MomentBase)
		}
		if seed := binary.LittleEndian.Uint32(b[72:]); seed != sh.MomentSeed {
			t.Errorf("shard %d: seed %d, want %d", k, seed, sh.MomentSeed)
		}
	}
	for i := range tab.Segs {
		if shard := binary.LittleEndian.Uint32(tab.Bytes[i*segmentBytes+56:]); i > 0 && shard == 0 {
			t.Errorf("segment %d packed with shard 0", i)
		}
	}
	static := tab.StaticPart()
	if bytes.Equal(static, tab.Bytes) {
		t.Error("StaticPart did not clear the factors")
	}
	// the next step's table: other factors and seeds, the same static part;
	// another buffer: another static part
	next := slices.Clone(shards)
	next[2].MomentSeed = 99
	later, _ := PackShards(segs, next)
	if bytes.Equal(later.Bytes, tab.Bytes) || !bytes.Equal(later.StaticPart(), static) {
		t.Error("tables differing only in a moment seed: the same bytes, or different static parts")
	}
	next[1].Grad += 0x40
	moved, _ := PackShards(segs, next)
	if bytes.Equal(moved.StaticPart(), static) {
		t.Error("tables with another gradient buffer have the same static part")
	}
	if got := tab.shardsPtr(0x10000); got != 0x10000+cuda.DevicePtr(tab.Segs*segmentBytes) {
		t.Errorf("shards at %#x", got)
	}
	a := UpdateLaunch{Rule: RuleAdamW, PerMoment: true, VType: MomentFP8, Table: tab}
	if err := a.checkMomentBases(); err != nil {
		t.Errorf("bases 4, 8, 12: %v", err)
	}
	shards[1].MomentBase = 6
	bad, _ := PackShards(segs, shards)
	a.Table = bad
	if err := a.checkMomentBases(); err == nil || !strings.Contains(err.Error(), "position 6") {
		t.Errorf("base 6: error %v, want one naming position 6", err)
	}
	if _, err := PackShards(segs, shards[:2]); err == nil {
		t.Error("PackShards with 3 segment lists and 2 shards: no error")
	}
}

// TestSameStatic checks SameStatic against its definition (the static
// parts equal) on tables over several shards that differ from one base
// table in one byte each: every byte of the table in turn, so that each
// factor and seed byte must be ignored and every other byte must count.
func TestSameStatic(t *testing.T) {
	segs := [][]Segment{
		{{Off: 0, Len: 5000, Mode: ModeTensorCurrent, Slot: 1, StepSize: 1e-3, Decay: 0.9}},
		{{Off: 8, Len: 4097, Mode: ModeTile, Slot: 2, StepSize: 2e-3, Decay: 1, ParamOffset: 3, Cols: 128}, {Off: 5000, Len: 9, Mode: ModeBlock}},
	}
	shards := []Shard{{Master: 0x100, M: 0x200, V: 0x300, MomentBase: 4, MomentSeed: 7}, {Master: 0x1100, Grad: 0x1400, MomentSeed: 9}}
	base, err := PackShards(segs, shards)
	if err != nil {
		t.Fatal(err)
	}
	if !base.SameStatic(base.Bytes) || base.SameStatic(base.Bytes[:len(base.Bytes)-1]) {
		t.Fatal("SameStatic wrong on the table itself or a shorter one")
	}
	ignored := 0
	for i := range base.Bytes {
		other := append([]byte(nil), base.Bytes...)
		other[i] ^= 0x5a
		o := base
		o.Bytes = other
		want := bytes.Equal(base.StaticPart(), o.StaticPart())
		if got := base.SameStatic(other); got != want {
			t.Fatalf("byte %d changed: SameStatic %t, static parts equal %t", i, got, want)
		}
		if want {
			ignored++
		}
	}
	// 8 factor bytes per segment, 4 seed bytes per shard
	if want := 8*base.Segs + 4*base.Shards; ignored != want {
		t.Fatalf("%d bytes ignored, want %d", ignored, want)
	}
}

// TestSetFactors checks that a table packed once, with each step's factors
// and seeds written in place (SetFactors, SetSeed), has the bytes of the
// table packed anew with them, step after step, and that the two report a
// change exactly when the bytes change.
func TestSetFactors(t *testing.T) {
	segs := [][]Segment{
		{{Off: 0, Len: 5000, Mode: ModeTensorCurrent, Slot: 1}, {Off: 5000, Len: 0}},
		{{Off: 8, Len: 4097, Mode: ModeTile, Slot: 2, ParamOffset: 3, Cols: 128}, {Off: 5000, Len: 9, Mode: ModeBlock}},
	}
	shards := []Shard{{Master: 0x100, M: 0x200, V: 0x300, MomentBase: 4}, {Master: 0x1100, Grad: 0x1400}}
	planned, err := PackShards(segs, shards)
	if err != nil {
		t.Fatal(err)
	}
	static := planned.StaticPart()
	for step := range 6 {
		want := make([][]Segment, len(segs))
		row, changed := 0, false
		for k, ss := range segs {
			want[k] = slices.Clone(ss)
			for i := range ss {
				// a factor that holds for two steps, one that changes each step
				want[k][i].StepSize, want[k][i].Decay = float32(1+step/2)*1e-3, 1-float32(step+k+i)*1e-4
				if ss[i].Len > 0 {
					changed = planned.SetFactors(row, want[k][i].StepSize, want[k][i].Decay) || changed
					row++
				}
			}
			shards[k].MomentSeed = uint32(step/3 + k)
			changed = planned.SetSeed(k, shards[k].MomentSeed) || changed
		}
		fresh, err := PackShards(want, shards)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(planned.Bytes, fresh.Bytes) {
			t.Fatalf("step %d: the planned table with its factors and seeds differs from the table packed anew", step)
		}
		if !changed {
			t.Errorf("step %d: new factors reported unchanged", step)
		}
		if !bytes.Equal(planned.StaticPart(), static) {
			t.Fatalf("step %d: the static part changed", step)
		}
	}
	if planned.SetFactors(0, 3e-3, 1-5e-4) || planned.SetSeed(1, 2) {
		t.Error("the same factors or seed again reported as a change")
	}
}
