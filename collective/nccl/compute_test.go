package nccl_test

import (
	"testing"

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
func zeroed(t *testing.T, d *cuda.Device, s *cuda.Stream, words int) collective.DeviceBuffer {
	t.Helper()
	p, err := d.Alloc(4 * words)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Free(p) })
	if err := s.Memset32(p, 0, words); err != nil {
		t.Fatal(err)
	}
	return collective.DeviceBuffer{Ptr: uintptr(p), Size: 4 * words, Device: d.Ordinal()}
}

// sumGroup is the group of one float32 all-reduce (sum) of src into dst.
func sumGroup(dst, src collective.Buffer) []collective.Op {
	return []collective.Op{{Kind: collective.OpAllReduce, Dst: dst, Src: src, DType: collective.Float32, Reduce: collective.Sum}}
}

// hostGroup is a group a device communicator refuses in Start (host memory).
func hostGroup() []collective.Op {
	return sumGroup(collective.HostBuffer(make([]byte, 8)), collective.HostBuffer(make([]byte, 8)))
}
