package rendezvous

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
)

// storeCodes are the statuses the store answers a bad request with.
var storeCodes = map[codes.Code]bool{
	codes.InvalidArgument: true, codes.ResourceExhausted: true, codes.NotFound: true, codes.OutOfRange: true,
	codes.FailedPrecondition: true, codes.Canceled: true, codes.DeadlineExceeded: true,
}

// checkHeld recomputes what s holds from its runs and compares it with the
// totals put keeps, and with the bounds.
func checkHeld(t *testing.T, s *Server) {
	t.Helper()
	var bytes int64
	keys := 0
	for _, r := range s.runs {
		for k, v := range r.values {
			bytes += int64(len(k) + len(v))
			keys++
		}
	}
	if bytes != s.storedBytes || keys != s.storedKeys || bytes > s.maxBytes || keys > maxStoredKeys || len(s.runs) > maxRuns {
		t.Fatalf("server counts %d bytes and %d keys in %d runs; holds %d bytes and %d keys", s.storedBytes, s.storedKeys, len(s.runs), bytes, keys)
	}
}

// FuzzStoreRequest decodes a request as the server does (the method's
// handler and the wire codec) and serves it twice on a fresh server with a
// context already ended, so that nothing waits. Every answer is a value or
// one of the store's statuses; what the server holds matches its counts
// and bounds; a counter holds what Add returned; a value holds what Set
// stored.
func FuzzStoreRequest(f *testing.F) {
	for i, m := range serviceDesc.Methods {
		req := request{Run: "r", Rank: 0, WorldSize: 1, Keys: []string{"k"}, Value: []byte("7"), Delta: 5, Timeout: -1}
		if m.MethodName == methodWait {
			req.Keys = append(req.Keys, "missing")
		}
		b, _ := json.Marshal(req)
		f.Add(uint8(i), b)
	}
	f.Add(uint8(4), []byte(`{"run":"r","keys":["k"],"delta":9223372036854775807}`))
	f.Add(uint8(0), []byte(`{"run":"r","rank":65535,"world_size":65536,"timeout":-1}`))
	f.Add(uint8(1), []byte(`{"run":"","keys":[""],"value":null}`))
	f.Fuzz(func(t *testing.T, method uint8, body []byte) {
		s := &Server{runs: map[string]*runState{}, maxBytes: 1 << 12, done: make(chan struct{})}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		desc := serviceDesc.Methods[int(method)%len(serviceDesc.Methods)]
		var req request
		dec := func(v any) error {
			err := jsonCodec{}.Unmarshal(mem.BufferSlice{mem.SliceBuffer(body)}, v)
			req = *v.(*request)
			return err
		}
		for range 2 {
			out, err := desc.Handler(s, ctx, dec, nil)
			if err != nil {
				if json.Unmarshal(body, new(request)) == nil && !storeCodes[status.Code(err)] {
					t.Fatalf("%s %s: %v", desc.MethodName, body, err)
				}
				checkHeld(t, s)
				continue
			}
			checkHeld(t, s)
			resp := out.(*response)
			switch stored := s.runs[req.Run].values; desc.MethodName {
			case methodAdd:
				if v, err := strconv.ParseInt(string(stored[req.Keys[0]]), 10, 64); err != nil || v != resp.Counter {
					t.Fatalf("Add returned %d, the counter holds %q", resp.Counter, stored[req.Keys[0]])
				}
			case methodSet:
				if string(stored[req.Keys[0]]) != string(req.Value) {
					t.Fatalf("Set %q, the key holds %q", req.Value, stored[req.Keys[0]])
				}
			}
		}
	})
}
