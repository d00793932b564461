package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Server serves the store of any number of runs, each in its own namespace.
// Connect starts one on rank 0; Serve starts one on a listener of the
// caller's choice (tests, or a store that outlives the ranks).
type Server struct {
	gs   *grpc.Server
	lis  net.Listener
	done chan struct{} // closed when gs.Serve has returned

	mu          sync.Mutex
	runs        map[string]*runState
	storedBytes int64 // keys and values of every run (see put)
	storedKeys  int
	maxBytes    int64 // bound of storedBytes: maxStoredBytes (tests lower it)
	waiting     int   // calls blocked in wait (tests wait for them)
	closed      bool
}

// runState is the store of one run.
type runState struct {
	worldSize int            // WORLD_SIZE of the first rank that joined
	sizes     map[int]int    // WORLD_SIZE registered by each rank
	nonces    map[int]uint64 // process nonce of each rank that joined
	left      map[int]bool   // ranks whose attendance stream has ended
	values    map[string][]byte
	conflict  string        // set once ranks are found not to form one job
	complete  bool          // every rank has joined: membership is fixed
	diagnosed map[int]bool  // ranks that asked who is missing after giving up
	changed   chan struct{} // closed and replaced on every change
}

// ServeOption configures Serve.
type ServeOption func(*serveOptions)

type serveOptions struct {
	secret string
	guard  func(net.Listener) *guard // the connections' bounds; tests lower them
}

// WithSecret makes the server refuse every call that does not carry the
// token of secret (see AuthServerOption); Connect passes Config.Secret.
func WithSecret(secret string) ServeOption {
	return func(o *serveOptions) { o.secret = secret }
}

// Serve serves the store on lis until Close. It takes ownership of lis.
// Without WithSecret (or with an empty secret) it accepts every caller. Its
// connections are bounded as Guard's are.
func Serve(lis net.Listener, opts ...ServeOption) *Server {
	o := serveOptions{guard: func(lis net.Listener) *guard {
		return newGuard(lis, FirstCallTimeout, MaxPendingConns, MaxConns)
	}}
	for _, f := range opts {
		f(&o)
	}
	g := o.guard(lis)
	s := &Server{
		gs: grpc.NewServer(
			grpc.ForceServerCodecV2(jsonCodec{}),
			grpc.WaitForHandlers(true),
			g.serverOption(o.secret),
			grpc.MaxRecvMsgSize(maxMessageBytes),
			grpc.MaxConcurrentStreams(maxStreams),
		),
		lis:      g,
		done:     make(chan struct{}),
		runs:     make(map[string]*runState),
		maxBytes: maxStoredBytes,
	}
	s.gs.RegisterService(&serviceDesc, s)
	go func() {
		defer close(s.done)
		_ = s.gs.Serve(g) // returns once Stop was called; lis is closed by then
	}()
	return s
}

// listen listens where rank 0 serves the store for Connect: on
// cfg.MasterAddr (its first address if it is a name), at cfg.MasterPort, and
// nowhere else: a loopback MASTER_ADDR keeps the store off the network. A
// port taken by another process gives an error wrapping ErrPortInUse.
func listen(ctx context.Context, cfg Config) (net.Listener, error) {
	ips, err := resolve(ctx, cfg.MasterAddr)
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort(ips[0], strconv.Itoa(cfg.MasterPort))
	lis, err := net.Listen("tcp", addr)
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return nil, fmt.Errorf("rendezvous: rank 0 cannot serve the store on port %d (MASTER_PORT): another process listens on it: %w", cfg.MasterPort, ErrPortInUse)
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return nil, fmt.Errorf("rendezvous: rank 0 cannot serve the store on %s: MASTER_ADDR=%s is not an address of this host (rank 0 must run on the host MASTER_ADDR names): %w",
			addr, cfg.MasterAddr, ErrConfig)
	case err != nil:
		return nil, fmt.Errorf("rendezvous: rank 0 cannot serve the store on %s: %w", addr, err)
	}
	return lis, nil
}

// Addr returns the address the server listens on.
func (s *Server) Addr() net.Addr { return s.lis.Addr() }

// Close stops the server: calls in progress fail, and Close returns after
// every handler and the serving goroutine have returned. It may be called
// more than once.
func (s *Server) Close() {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		for _, r := range s.runs {
			r.notify()
		}
	}
	s.mu.Unlock()
	// Let calls that are answered already get their replies out (the
	// handlers return at once now), but do not wait for clients.
	stopped := make(chan struct{})
	go func() {
		s.gs.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(time.Second):
		s.gs.Stop()
		<-stopped
	}
	<-s.done
}

// waitInformed waits, at most d, until ranks 0..n-1 of run have all tried to
// join, n being the largest WORLD_SIZE registered: once a conflict is
// found, that is when every rank has been told.
func (s *Server) waitInformed(run string, d time.Duration) {
	expired := time.After(d)
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.run(run)
	for !s.closed {
		n := 0
		for _, ws := range r.sizes {
			n = max(n, ws)
		}
		all := true
		for rank := range n {
			if _, ok := r.sizes[rank]; !ok {
				all = false
			}
		}
		if all {
			return
		}
		changed := r.changed
		s.mu.Unlock()
		select {
		case <-changed:
			s.mu.Lock()
		case <-expired:
			s.mu.Lock()
			return
		}
	}
}

// waitDiagnosed waits, at most d, until every rank of run that joined, but
// rank 0, has asked who is missing after giving up (see Store.joinEnded):
// rank 0, which serves the store, gives them that long before it stops.
func (s *Server) waitDiagnosed(run string, d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.run(run)
	_, _ = s.wait(ctx, r, 0, func() bool {
		for rank := range r.nonces {
			if rank != 0 && !r.diagnosed[rank] {
				return false
			}
		}
		return true
	})
}

// waitLeft waits until every rank of run has left (see methodAttend), or
// timeout passes, or the server is closed.
func (s *Server) waitLeft(run string, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.run(run)
	_, _ = s.wait(ctx, r, 0, func() bool { return r.worldSize > 0 && len(r.left) >= r.worldSize })
}

// run returns the state of the run named id, creating it. s.mu must be held.
func (s *Server) run(id string) *runState {
	r := s.runs[id]
	if r == nil {
		r = &runState{
			sizes:     make(map[int]int),
			nonces:    make(map[int]uint64),
			left:      make(map[int]bool),
			diagnosed: make(map[int]bool),
			values:    make(map[string][]byte),
			changed:   make(chan struct{}),
		}
		s.runs[id] = r
	}
	return r
}

// notify wakes every call waiting on r. s.mu must be held.
func (r *runState) notify() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// handle serves one call.
func (s *Server) handle(ctx context.Context, method string, req *request) (*response, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, status.Error(codes.Unavailable, "store is shutting down")
	}
	if err := checkRequest(req); err != nil {
		return nil, err
	}
	if _, ok := s.runs[req.Run]; !ok && len(s.runs) >= maxRuns {
		return nil, status.Errorf(codes.ResourceExhausted, "store full: %d runs", len(s.runs))
	}
	r := s.run(req.Run)
	if r.conflict != "" {
		return nil, status.Error(codes.FailedPrecondition, r.conflict)
	}
	if method != methodJoin && len(req.Keys) == 0 {
		return nil, status.Errorf(codes.InvalidArgument, "%s without a key", method)
	}
	switch method {
	case methodJoin:
		return s.join(ctx, r, req)
	case methodSet:
		if err := s.put(r, req.Keys[0], slices.Clone(req.Value)); err != nil {
			return nil, err
		}
		return &response{}, nil
	case methodGet:
		v, ok := r.values[req.Keys[0]]
		if !ok {
			return nil, status.Errorf(codes.NotFound, "no key %q", req.Keys[0])
		}
		return &response{Values: [][]byte{v}}, nil
	case methodWait:
		return s.waitKeys(ctx, r, req)
	case methodAdd:
		return s.add(r, req.Keys[0], req.Delta)
	}
	return nil, status.Errorf(codes.Unimplemented, "no method %s", method)
}

// attend serves methodAttend: it acks the rank's first message, waits for
// the end of the stream and then counts the rank as gone.
func (s *Server) attend(stream grpc.ServerStream) error {
	req := new(request)
	if err := stream.RecvMsg(req); err != nil {
		return err
	}
	if err := stream.SendMsg(&response{}); err != nil {
		return err
	}
	if err := checkRequest(req); err != nil {
		return err
	}
	var more request
	_ = stream.RecvMsg(&more) // returns when the client ends the stream or goes away
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.runs[req.Run]
	if r == nil {
		return nil // a run nobody joined: nothing to record
	}
	if _, joined := r.nonces[req.Rank]; !joined {
		return nil
	}
	r.left[req.Rank] = true
	r.notify()
	return nil
}

// join registers req.Rank in r and waits until every rank has joined (with
// a negative req.Timeout, it only registers and says who is missing). Once
// every rank has joined, the membership is fixed: a join that does not
// repeat a member's is refused, and only its caller learns it.
func (s *Server) join(ctx context.Context, r *runState, req *request) (*response, error) {
	if req.WorldSize < 1 || req.WorldSize > MaxWorldSize || req.Rank < 0 || req.Rank >= req.WorldSize {
		return nil, status.Errorf(codes.InvalidArgument, "rank %d of world size %d (at most %d)", req.Rank, req.WorldSize, MaxWorldSize)
	}
	if req.Timeout < 0 && r.nonces[req.Rank] == req.Nonce {
		r.diagnosed[req.Rank] = true
	}
	if r.complete {
		if n, ok := r.nonces[req.Rank]; !ok || n != req.Nonce || req.WorldSize != r.worldSize {
			return nil, status.Errorf(codes.FailedPrecondition, "rank %d of %d cannot join: every rank of the run has joined already", req.Rank, req.WorldSize)
		}
		return &response{}, nil
	}
	if n, ok := r.nonces[req.Rank]; ok && n != req.Nonce {
		r.conflict = fmt.Sprintf("two processes joined as rank %d (RANK=%d set twice?)", req.Rank, req.Rank)
	}
	if r.worldSize == 0 {
		r.worldSize = req.WorldSize
	}
	r.sizes[req.Rank] = req.WorldSize
	r.nonces[req.Rank] = req.Nonce
	if r.conflict == "" && req.WorldSize != r.worldSize {
		r.conflict = "WORLD_SIZE differs between ranks: " + describeSizes(r.sizes)
	}
	if r.conflict == "" && len(r.nonces) >= r.worldSize {
		r.complete = true
	}
	r.notify()
	var missing []string
	ok, err := s.wait(ctx, r, time.Duration(req.Timeout), func() bool { return r.complete })
	if err != nil {
		return nil, err
	}
	if !ok {
		for rank := range r.worldSize {
			if _, in := r.nonces[rank]; !in {
				missing = append(missing, strconv.Itoa(rank))
			}
		}
	}
	return &response{Missing: missing}, nil
}

// describeSizes lists the world size of each rank, by rank.
func describeSizes(sizes map[int]int) string {
	ranks := make([]int, 0, len(sizes))
	for rank := range sizes {
		ranks = append(ranks, rank)
	}
	slices.Sort(ranks)
	parts := make([]string, len(ranks))
	for i, rank := range ranks {
		parts[i] = fmt.Sprintf("rank %d has WORLD_SIZE=%d", rank, sizes[rank])
	}
	return strings.Join(parts, ", ")
}

// waitKeys waits until every key of req exists and returns their values, or
// the keys still missing after req.Timeout.
func (s *Server) waitKeys(ctx context.Context, r *runState, req *request) (*response, error) {
	present := func() bool {
		for _, k := range req.Keys {
			if _, ok := r.values[k]; !ok {
				return false
			}
		}
		return true
	}
	ok, err := s.wait(ctx, r, time.Duration(req.Timeout), present)
	if err != nil {
		return nil, err
	}
	resp := &response{}
	for _, k := range req.Keys {
		if v, in := r.values[k]; !in {
			resp.Missing = append(resp.Missing, k)
		} else if ok {
			resp.Values = append(resp.Values, v)
		}
	}
	if !ok {
		resp.Values = nil
	}
	return resp, nil
}

// add adds delta to the counter at key (absent counts as 0).
func (s *Server) add(r *runState, key string, delta int64) (*response, error) {
	var v int64
	if old, ok := r.values[key]; ok {
		var err error
		if v, err = strconv.ParseInt(string(old), 10, 64); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "key %q holds %q, not a decimal integer", key, old)
		}
	}
	if delta > 0 && v > math.MaxInt64-delta || delta < 0 && v < math.MinInt64-delta {
		return nil, status.Errorf(codes.OutOfRange, "counter %q holds %d: adding %d overflows int64", key, v, delta)
	}
	v += delta
	if err := s.put(r, key, []byte(strconv.FormatInt(v, 10))); err != nil {
		return nil, err
	}
	return &response{Counter: v}, nil
}

// wait waits, with s.mu held (released while blocked), until done returns
// true (true, nil), timeout passes if it is positive (false, nil; at once if
// it is negative), ctx ends,
// the run turns out to have a conflict or the server closes (an error).
func (s *Server) wait(ctx context.Context, r *runState, timeout time.Duration, done func() bool) (bool, error) {
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	for {
		switch {
		case r.conflict != "":
			return false, status.Error(codes.FailedPrecondition, r.conflict)
		case s.closed:
			return false, status.Error(codes.Unavailable, "store is shutting down")
		case done():
			return true, nil
		case timeout < 0:
			return false, nil
		}
		changed := r.changed
		s.waiting++
		s.mu.Unlock()
		var timedOut, ended bool
		select {
		case <-changed:
		case <-expired:
			timedOut = true
		case <-ctx.Done():
			ended = true
		}
		s.mu.Lock()
		s.waiting--
		switch {
		case timedOut:
			return done(), nil
		case ended:
			return false, status.FromContextError(ctx.Err()).Err()
		}
	}
}
