package rendezvous

import (
	"context"
	"encoding/json"

	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
)

// The store's gRPC service is written by hand (no generated code): one
// service, unary methods, and request and response messages that are Go
// structs carried as JSON by jsonCodec.
const serviceName = "distopt.rendezvous.Store"

// Method names of the service.
const (
	methodJoin = "Join" // register Rank and WorldSize; wait until all ranks joined
	methodSet  = "Set"  // Keys[0] = Value
	methodGet  = "Get"  // value of Keys[0], or NotFound
	methodWait = "Wait" // values of Keys once all exist, or Missing after Timeout
	methodAdd  = "Add"  // Keys[0] += Delta, returns Counter
	// methodAttend is a stream that a rank opens (the server acks its first
	// message) and keeps open while its store is open: the server counts the
	// rank as gone when it ends, whether by Close or because the process died.
	methodAttend = "Attend"
)

// request is the message of every method; each uses the fields it needs.
type request struct {
	Run       string   `json:"run"`
	Rank      int      `json:"rank"`
	WorldSize int      `json:"world_size,omitempty"`
	Nonce     uint64   `json:"nonce,omitempty"`
	Keys      []string `json:"keys,omitempty"`
	Value     []byte   `json:"value,omitempty"`
	Delta     int64    `json:"delta,omitempty"`
	// Timeout bounds how long Join and Wait wait on the server, in
	// nanoseconds; 0 means until the call's context ends.
	Timeout int64 `json:"timeout,omitempty"`
}

// response is the reply of every method.
type response struct {
	Values  [][]byte `json:"values,omitempty"`
	Missing []string `json:"missing,omitempty"` // keys (Wait) or ranks (Join) still absent at Timeout
	Counter int64    `json:"counter,omitempty"`
}

// jsonCodec encodes messages as JSON.
type jsonCodec struct{}

func (jsonCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (jsonCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return json.Unmarshal(data.Materialize(), v)
}

func (jsonCodec) Name() string { return "distopt-rendezvous-json" }

// handler is what the service desc dispatches to (implemented by *Server).
type handler interface {
	handle(ctx context.Context, method string, req *request) (*response, error)
	attend(stream grpc.ServerStream) error
}

// serviceDesc describes the service to grpc.Server.RegisterService.
var serviceDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*handler)(nil),
	Methods: []grpc.MethodDesc{
		unaryMethod(methodJoin),
		unaryMethod(methodSet),
		unaryMethod(methodGet),
		unaryMethod(methodWait),
		unaryMethod(methodAdd),
	},
	Streams: []grpc.StreamDesc{{
		StreamName:    methodAttend,
		ClientStreams: true,
		ServerStreams: true,
		Handler: func(srv any, stream grpc.ServerStream) error {
			return srv.(handler).attend(stream)
		},
	}},
}

// unaryMethod returns the descriptor of one method: it decodes a request and
// passes it to handler.handle, through the server's interceptor if any.
func unaryMethod(name string) grpc.MethodDesc {
	full := "/" + serviceName + "/" + name
	return grpc.MethodDesc{
		MethodName: name,
		Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			req := new(request)
			if err := dec(req); err != nil {
				return nil, err
			}
			h := srv.(handler)
			if icpt == nil {
				return h.handle(ctx, name, req)
			}
			info := &grpc.UnaryServerInfo{Server: srv, FullMethod: full}
			return icpt(ctx, req, info, func(ctx context.Context, r any) (any, error) {
				return h.handle(ctx, name, r.(*request))
			})
		},
	}
}
