package grpccomm

import (
	"bytes"
	"encoding/binary"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
)

// FuzzPeerFrame decodes a frame as an endpoint does (frameCodec) and checks
// it against a decoding of its own: a frame shorter than its header is an
// error; the header's fields and the payload are the bytes the layout
// names. The frame then goes through the hello check of rank 1 of a
// communicator of 4 ranks, which accepts exactly the hello of another rank
// of it, and through describe (error messages), which must not panic.
func FuzzPeerFrame(f *testing.F) {
	const id, size, rank = "job/grpccomm/0", 4, 1
	frame := func(h header, payload string) []byte {
		b := make([]byte, headerLen+len(payload))
		h.put(b)
		copy(b[headerLen:], payload)
		return b
	}
	f.Add(frame(header{typ: frameHello, index: 0, count: size, root: rank}, id))
	f.Add(frame(header{typ: frameHello, index: rank, count: size, root: rank}, id))
	f.Add(frame(header{typ: frameDesc, kind: 3, dtype: 2, reduce: 1, seq: 7, index: 1, count: 2, total: 4096}, ""))
	f.Add(frame(header{typ: frameData, seq: 7, index: 1, phase: 1, chunk: 3}, "payload"))
	f.Add([]byte("short"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var in inFrame
		err := frameCodec{}.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, &in)
		if len(data) < headerLen {
			if err == nil {
				t.Fatalf("a frame of %d bytes decoded", len(data))
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		defer in.free()
		le := binary.LittleEndian
		want := header{typ: data[0], kind: data[1], dtype: data[2], reduce: data[3], phase: data[4],
			seq: le.Uint64(data[8:]), index: le.Uint32(data[16:]), count: le.Uint32(data[20:]),
			chunk: le.Uint32(data[24:]), root: le.Uint32(data[28:]), total: le.Uint64(data[32:])}
		if in.header != want || !bytes.Equal(in.payload, data[headerLen:]) {
			t.Fatalf("decoded %+v and %d payload bytes, want %+v and %d", in.header, len(in.payload), want, len(data)-headerLen)
		}
		_ = describe(&in.header)
		hello := want.typ == frameHello && string(data[headerLen:]) == id && want.count == size && want.root == rank &&
			want.index < size && want.index != rank
		err = checkHello(&in, id, size, rank)
		if hello != (err == nil) {
			t.Fatalf("checkHello(%+v, %q) = %v", in.header, in.payload, err)
		}
		if err != nil && status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("refusal %v, want FailedPrecondition", err)
		}
	})
}
