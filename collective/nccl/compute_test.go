package nccl_test

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/internal/cuda"
)

// newStream returns a new stream of d (a communicator's Config.Compute, a
// reader), destroyed with the test.
func newStream(t *testing.T, d *cuda.Device) *cuda.Stream {
	t.Helper()
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Destroy() })
	return s
}

// zeroed returns words float32 of d's memory, freed with the test, zeroed
// on s.
func zeroed(t *testing.T, d *cuda.Device, s *cuda.Stream, words int) buffer.DeviceBuffer {
	t.Helper()
	p, err := d.Alloc(4 * words)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Free(p) })
	if err := s.Memset32(p, 0, words); err != nil {
		t.Fatal(err)
	}
	return buffer.DeviceBuffer{Ptr: uintptr(p), Size: 4 * words, Device: d.Ordinal()}
}

// sumGroup is the group of one float32 all-reduce (sum) of src into dst.
func sumGroup(dst, src buffer.Buffer) []collective.Op {
	return []collective.Op{{Kind: collective.OpAllReduce, Dst: dst, Src: src, DType: buffer.Float32, Reduce: collective.Sum}}
}

// hostGroup is a group a device communicator refuses in Start (host memory).
func hostGroup() []collective.Op {
	return sumGroup(buffer.HostBuffer(make([]byte, 8)), buffer.HostBuffer(make([]byte, 8)))
}

// threes returns words float32 of d's memory holding 3 and words zeroed
// (queued on s), and pinned host memory of the same size, all freed with
// the test: a large all-reduce of src into dst on one rank copies the 3s,
// and a reader that overtook it would read zeros into host.
func threes(t *testing.T, d *cuda.Device, s *cuda.Stream, words int) (src, dst buffer.DeviceBuffer, host []byte) {
	t.Helper()
	src, dst = zeroed(t, d, s, words), zeroed(t, d, s, words)
	if err := s.Memset32(cuda.DevicePtr(src.Ptr), math.Float32bits(3), words); err != nil {
		t.Fatal(err)
	}
	h, err := d.AllocHost(4 * words)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Free() })
	return src, dst, h.Bytes()
}

// allThrees fails the test at the first float32 of got that is not 3.
func allThrees(t *testing.T, got []byte, what string) {
	t.Helper()
	for i := range len(got) / 4 {
		if v := math.Float32frombits(binary.LittleEndian.Uint32(got[4*i:])); v != 3 {
			t.Fatalf("%s: element %d is %g, want 3", what, i, v)
		}
	}
}
