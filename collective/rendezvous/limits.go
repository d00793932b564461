package rendezvous

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Bounds of what one server holds and accepts. They are far above what a
// job needs (a few small values per rank and per communicator) and keep a
// buggy or hostile client from growing rank 0's memory without bound. A
// call past a bound fails with ResourceExhausted (ErrLimit for Store's
// methods) and changes nothing.
const (
	maxMessageBytes = 8 << 20   // one request on the wire
	maxKeyBytes     = 4 << 10   // one key or run id
	maxValueBytes   = 1 << 20   // one value
	maxStoredBytes  = 256 << 20 // keys and values of every run of a server
	maxStoredKeys   = 1 << 20   // keys of every run of a server
	maxRuns         = 1 << 10   // runs of a server
	maxStreams      = 1 << 12   // concurrent calls on one connection
)

// checkRequest checks the sizes of req that do not depend on the store's
// state.
func checkRequest(req *request) error {
	if len(req.Run) > maxKeyBytes {
		return status.Errorf(codes.ResourceExhausted, "run id of %d bytes exceeds %d", len(req.Run), maxKeyBytes)
	}
	if len(req.Keys) > MaxWorldSize {
		return status.Errorf(codes.ResourceExhausted, "%d keys in one call exceed %d", len(req.Keys), MaxWorldSize)
	}
	for _, k := range req.Keys {
		if len(k) > maxKeyBytes {
			return status.Errorf(codes.ResourceExhausted, "key of %d bytes exceeds %d", len(k), maxKeyBytes)
		}
	}
	if len(req.Value) > maxValueBytes {
		return status.Errorf(codes.ResourceExhausted, "value of %d bytes exceeds %d", len(req.Value), maxValueBytes)
	}
	if req.Rank < 0 || req.Rank >= MaxWorldSize {
		return status.Errorf(codes.InvalidArgument, "rank %d outside [0, %d)", req.Rank, MaxWorldSize)
	}
	return nil
}

// put stores value at key in r, within the server's bounds. s.mu must be
// held.
func (s *Server) put(r *runState, key string, value []byte) error {
	old, exists := r.values[key]
	grow := int64(len(value)) - int64(len(old))
	keys := 0
	if !exists {
		grow += int64(len(key))
		keys = 1
	}
	if s.storedBytes+grow > s.maxBytes || s.storedKeys+keys > maxStoredKeys {
		return status.Errorf(codes.ResourceExhausted, "store full: %d keys and %d bytes held, bounds %d keys and %d bytes",
			s.storedKeys, s.storedBytes, maxStoredKeys, s.maxBytes)
	}
	s.storedBytes += grow
	s.storedKeys += keys
	r.values[key] = value
	r.notify()
	return nil
}
