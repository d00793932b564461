package grpccomm

import (
	"encoding/binary"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
)

// Every rank serves one bidirectional streaming method; every other rank
// opens one stream to it and sends its frames for this rank on it, in the
// order both sides derive from the op sequence. The server side sends one
// frame back, the ack of the hello, and ends the stream with a status that
// tells why (OK: closed; Aborted: this rank aborted). No generated code: the
// service descriptor is written by hand and messages travel through
// frameCodec.
const (
	serviceName = "distopt.grpccomm.Peer"
	methodName  = "/" + serviceName + "/Frames"
)

// streamHandler is what the service desc dispatches to (implemented by *Comm).
type streamHandler interface {
	serveFrames(stream grpc.ServerStream) error
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*streamHandler)(nil),
	Streams: []grpc.StreamDesc{{
		StreamName:    "Frames",
		ServerStreams: true,
		ClientStreams: true,
		Handler: func(srv any, stream grpc.ServerStream) error {
			return srv.(streamHandler).serveFrames(stream)
		},
	}},
}

// Frame types.
const (
	frameHello = 1 + iota // client -> server, first: payload = communicator id
	frameAck              // server -> client, answer to hello
	frameDesc             // one per op and peer, before its data: the op's shape
	frameData             // a chunk of an op's data
)

// headerLen is the size of a frame's header; the payload follows it.
const headerLen = 40

// header is the fixed part of a frame, little-endian on the wire:
//
//	0 typ u8 | 1 kind u8 | 2 dtype u8 | 3 reduce u8 | 4 phase u8 | 5..7 zero
//	8 seq u64 | 16 index u32 | 20 count u32 | 24 chunk u32 | 28 root u32
//	32 total u64
//
// Desc frames carry the op (kind, dtype, reduce, root, total = its size in
// bytes) and its place (seq = the group's number, index and count = its
// place in the group). Data frames carry seq, index, phase and chunk.
// Hello frames carry the sender's rank in index, the world size in count,
// the receiver's rank in root.
type header struct {
	typ, kind, dtype, reduce, phase uint8
	seq                             uint64
	index, count, chunk, root       uint32
	total                           uint64
}

func (h *header) put(b []byte) {
	b[0], b[1], b[2], b[3], b[4] = h.typ, h.kind, h.dtype, h.reduce, h.phase
	b[5], b[6], b[7] = 0, 0, 0
	binary.LittleEndian.PutUint64(b[8:], h.seq)
	binary.LittleEndian.PutUint32(b[16:], h.index)
	binary.LittleEndian.PutUint32(b[20:], h.count)
	binary.LittleEndian.PutUint32(b[24:], h.chunk)
	binary.LittleEndian.PutUint32(b[28:], h.root)
	binary.LittleEndian.PutUint64(b[32:], h.total)
}

func (h *header) get(b []byte) {
	h.typ, h.kind, h.dtype, h.reduce, h.phase = b[0], b[1], b[2], b[3], b[4]
	h.seq = binary.LittleEndian.Uint64(b[8:])
	h.index = binary.LittleEndian.Uint32(b[16:])
	h.count = binary.LittleEndian.Uint32(b[20:])
	h.chunk = binary.LittleEndian.Uint32(b[24:])
	h.root = binary.LittleEndian.Uint32(b[28:])
	h.total = binary.LittleEndian.Uint64(b[32:])
}

// outFrame is a frame to send: header and payload already laid out in buf,
// whose reference passes to gRPC on SendMsg.
type outFrame struct{ buf mem.Buffer }

// newOutFrame copies h and payload into a pooled buffer. This is the only
// copy of the payload on the sending side, and the last time the caller's
// memory is read for this frame.
func newOutFrame(h *header, payload []byte) *outFrame {
	pool := mem.DefaultBufferPool()
	b := pool.Get(headerLen + len(payload))
	h.put(*b)
	copy((*b)[headerLen:], payload)
	return &outFrame{buf: mem.NewBuffer(b, pool)}
}

// inFrame is a received frame; payload lies in buf, which the receiver
// must release (free) once done with the payload.
type inFrame struct {
	header
	payload []byte
	buf     mem.Buffer
}

func (f *inFrame) free() {
	if f.buf != nil {
		f.buf.Free()
		f.buf = nil
		f.payload = nil
	}
}

// frameCodec moves outFrame and inFrame values without any other copy than
// joining the pieces of a message that arrived in several.
type frameCodec struct{}

func (frameCodec) Marshal(v any) (mem.BufferSlice, error) {
	f, ok := v.(*outFrame)
	if !ok {
		return nil, fmt.Errorf("grpccomm: cannot marshal %T", v)
	}
	buf := f.buf
	f.buf = nil // the reference passes to gRPC
	return mem.BufferSlice{buf}, nil
}

func (frameCodec) Unmarshal(data mem.BufferSlice, v any) error {
	f, ok := v.(*inFrame)
	if !ok {
		return fmt.Errorf("grpccomm: cannot unmarshal into %T", v)
	}
	if data.Len() < headerLen {
		return fmt.Errorf("grpccomm: frame of %d bytes, shorter than its header", data.Len())
	}
	f.buf = data.MaterializeToBuffer(mem.DefaultBufferPool())
	b := f.buf.ReadOnlyData()
	f.header.get(b)
	f.payload = b[headerLen:]
	return nil
}

func (frameCodec) Name() string { return "distopt-grpccomm-frame" }
