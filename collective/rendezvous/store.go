package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// maxPoll bounds one blocking call on the server (Join, Wait): longer waits
// are made of several calls, so that a lost reply never blocks for long.
const maxPoll = 5 * time.Second

// Store is one rank's client of the run's store. Its methods may be called
// from several goroutines.
type Store struct {
	cfg    Config
	cc     *grpc.ClientConn
	server *Server // the server this rank started (rank 0 under Connect)
	// stopAttending ends the attendance stream (see methodAttend).
	stopAttending context.CancelFunc

	mu     sync.Mutex
	seqs   map[string]int // calls made per sequence name (see Sequence)
	closed bool
}

// Connect joins the run described by cfg. On rank 0 it first serves the
// store at cfg.MasterAddress, on that address only (an error wrapping
// ErrPortInUse if the port is taken), accepting only callers that know
// cfg.Secret. On every rank it then connects to
// cfg.MasterAddress, retrying until ctx ends, registers cfg.Rank and
// cfg.WorldSize, and waits until all cfg.WorldSize ranks have joined.
//
// Errors: ErrConfig for an invalid cfg or a MasterAddr that DNS cannot
// resolve (at once); ErrAuth when the store refuses cfg.Secret;
// ErrMembership (on every rank) when
// ranks disagree on WORLD_SIZE or two processes have the same rank; an error
// wrapping ctx.Err() when ctx ends first, naming the ranks that have not
// joined or saying that rank 0's store could not be reached.
func Connect(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var srv *Server
	if cfg.Rank == 0 {
		lis, err := listen(ctx, cfg)
		if err != nil {
			return nil, err
		}
		srv = Serve(lis, WithSecret(cfg.Secret))
		if serveHook != nil {
			serveHook(srv)
		}
	}
	s, err := dial(ctx, cfg, srv)
	if err != nil {
		if srv != nil {
			switch {
			case errors.Is(err, ErrMembership):
				// Keep serving a while so that every rank learns why.
				srv.waitInformed(cfg.runID(), cfg.closeTimeout())
			case ctx.Err() != nil:
				// The others' deadlines end about now: let them ask
				// which ranks are missing.
				srv.waitDiagnosed(cfg.runID(), diagnoseTimeout)
			}
			srv.Close()
		}
		return nil, err
	}
	return s, nil
}

// serveHook, set by tests, is called with the server Connect starts on
// rank 0.
var serveHook func(*Server)

// Dial is Connect without a server on rank 0: every rank, rank 0 too,
// connects to a store already served (by Serve) at cfg.MasterAddress.
func Dial(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return dial(ctx, cfg, nil)
}

func dial(ctx context.Context, cfg Config, srv *Server) (*Store, error) {
	if _, err := resolve(ctx, cfg.MasterAddr); err != nil {
		return nil, err
	}
	cc, err := grpc.NewClient("passthrough:///"+cfg.MasterAddress(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		AuthDialOption(cfg.Secret),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(jsonCodec{}), grpc.WaitForReady(true)),
	)
	if err != nil {
		return nil, fmt.Errorf("rendezvous: store address %s: %w", cfg.MasterAddress(), err)
	}
	s := &Store{cfg: cfg, cc: cc, server: srv, seqs: make(map[string]int)}
	if err := s.join(ctx); err != nil {
		_ = cc.Close()
		return nil, err
	}
	if err := s.attend(ctx); err != nil {
		_ = cc.Close()
		return nil, s.fail(ctx, fmt.Sprintf("rank %d opening its attendance stream", cfg.Rank), err)
	}
	return s, nil
}

// attend opens the stream that tells the server this rank is there.
func (s *Store) attend(ctx context.Context) error {
	actx, cancel := context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, cancel) // give up with ctx until the ack
	defer stop()
	stream, err := s.cc.NewStream(actx, &serviceDesc.Streams[0], "/"+serviceName+"/"+methodAttend)
	if err == nil {
		err = stream.SendMsg(&request{Run: s.cfg.runID(), Rank: s.cfg.Rank})
	}
	if err == nil {
		err = stream.RecvMsg(new(response))
	}
	if err != nil {
		cancel()
		return err
	}
	s.stopAttending = cancel
	return nil
}

// join registers this rank and waits for the others.
func (s *Store) join(ctx context.Context) error {
	req := &request{WorldSize: s.cfg.WorldSize, Nonce: rand.Uint64()}
	what := fmt.Sprintf("rank %d joining run %q at %s", s.cfg.Rank, s.cfg.runID(), s.cfg.MasterAddress())
	reached := false
	var missing []string
	for {
		req.Timeout = int64(pollTimeout(ctx))
		resp, err := s.call(ctx, methodJoin, req)
		switch {
		case err == nil && len(resp.Missing) == 0:
			return nil
		case err == nil:
			reached = true
			missing = resp.Missing
		case reached && status.Code(err) == codes.Unavailable && !ended(ctx, err):
			// Rank 0 gave up (its deadline came first) and stopped serving.
			return fmt.Errorf("rendezvous: %s: rank 0's store stopped while ranks [%s] of %d had not joined: %w",
				what, strings.Join(missing, " "), s.cfg.WorldSize, err)
		case !ended(ctx, err):
			return s.fail(ctx, what, err)
		}
		if ctx.Err() != nil {
			return s.joinEnded(ctx, req, what, reached, missing)
		}
	}
}

// diagnoseTimeout bounds the call joinEnded makes after the caller's
// context has ended.
const diagnoseTimeout = 2 * time.Second

// joinEnded is the error of a join whose context ended. Whether the reply
// of the last call came before the end is a matter of timing, so it asks the
// store once more, without waiting and under a context of its own, which
// ranks are missing; only if that fails too does it fall back to what it
// knew (missing, if the store was reached at all).
func (s *Store) joinEnded(ctx context.Context, req *request, what string, reached bool, missing []string) error {
	dctx, cancel := context.WithTimeout(context.Background(), diagnoseTimeout)
	defer cancel()
	req.Timeout = -1
	resp, err := s.call(dctx, methodJoin, req, grpc.WaitForReady(false))
	switch {
	case err == nil && len(resp.Missing) == 0:
		return fmt.Errorf("rendezvous: %s: every rank joined only as the wait ended: %w", what, ctx.Err())
	case err == nil:
		reached, missing = true, resp.Missing
	case status.Code(err) == codes.FailedPrecondition:
		return s.fail(dctx, what, err)
	}
	if !reached {
		why := "is rank 0 running, and are MASTER_ADDR and MASTER_PORT right?"
		if conn, err := net.DialTimeout("tcp", s.cfg.MasterAddress(), diagnoseTimeout); err != nil {
			why = err.Error() + "; " + why
		} else {
			conn.Close()
		}
		return fmt.Errorf("rendezvous: %s: rank 0's store could not be reached (%s): %w", what, why, ctx.Err())
	}
	return fmt.Errorf("rendezvous: %s: ranks [%s] of %d never joined: %w", what, strings.Join(missing, " "), s.cfg.WorldSize, ctx.Err())
}

// pollTimeout is how long the server should wait in one blocking call: a
// little less than what remains of ctx, so that the reply (which names what
// is missing) arrives before ctx ends, and at most maxPoll.
func pollTimeout(ctx context.Context) time.Duration {
	d := maxPoll
	if deadline, ok := ctx.Deadline(); ok {
		left := time.Until(deadline)
		d = min(d, left-min(left/10, 200*time.Millisecond))
	}
	return max(d, time.Millisecond)
}

// ended reports whether ctx has ended, err being the error of a call made
// under it. gRPC enforces a call's deadline with a timer of its own, which
// may fire a moment before ctx's: a deadline error within a moment of ctx's
// deadline counts as the end of ctx, and ended waits for ctx to agree.
func ended(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return true
	}
	c := status.Code(err)
	if c != codes.DeadlineExceeded && c != codes.Canceled {
		return false
	}
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < 100*time.Millisecond {
		<-ctx.Done()
		return true
	}
	return false
}

// call makes one call under this rank's name.
func (s *Store) call(ctx context.Context, method string, req *request, opts ...grpc.CallOption) (*response, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	req.Run = s.cfg.runID()
	req.Rank = s.cfg.Rank
	resp := new(response)
	if err := s.cc.Invoke(ctx, "/"+serviceName+"/"+method, req, resp, opts...); err != nil {
		return nil, err
	}
	return resp, nil
}

// fail turns the error of a call into one of the package's errors.
func (s *Store) fail(ctx context.Context, what string, err error) error {
	if errors.Is(err, ErrClosed) {
		return fmt.Errorf("rendezvous: %s: %w", what, ErrClosed)
	}
	st := status.Convert(err)
	switch st.Code() {
	case codes.NotFound:
		return fmt.Errorf("rendezvous: %s: %w", what, ErrNotFound)
	case codes.Unauthenticated:
		return fmt.Errorf("rendezvous: %s: store at %s refused this rank's %s: %w", what, s.cfg.MasterAddress(), EnvSecret, ErrAuth)
	case codes.ResourceExhausted, codes.OutOfRange:
		return fmt.Errorf("rendezvous: %s: %s: %w", what, st.Message(), ErrLimit)
	case codes.FailedPrecondition:
		return fmt.Errorf("rendezvous: %s: %s: %w", what, st.Message(), ErrMembership)
	case codes.InvalidArgument:
		if strings.Contains(st.Message(), "not a decimal integer") {
			return fmt.Errorf("rendezvous: %s: %s: %w", what, st.Message(), ErrNotCounter)
		}
	case codes.DeadlineExceeded, codes.Canceled:
		if ended(ctx, err) {
			return fmt.Errorf("rendezvous: %s: %w", what, ctx.Err())
		}
	}
	return fmt.Errorf("rendezvous: %s: store at %s: %w", what, s.cfg.MasterAddress(), err)
}

// Config returns the configuration the store was connected with.
func (s *Store) Config() Config { return s.cfg }

// Rank returns this process's rank.
func (s *Store) Rank() int { return s.cfg.Rank }

// Size returns the number of ranks.
func (s *Store) Size() int { return s.cfg.WorldSize }

// Set stores value at key, replacing any previous value.
func (s *Store) Set(ctx context.Context, key string, value []byte) error {
	checkKey(key)
	if _, err := s.call(ctx, methodSet, &request{Keys: []string{key}, Value: value}); err != nil {
		return s.fail(ctx, "set "+strconv.Quote(key), err)
	}
	return nil
}

// Get returns the value at key, or an error wrapping ErrNotFound if there
// is none. It does not wait; see Wait.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	checkKey(key)
	resp, err := s.call(ctx, methodGet, &request{Keys: []string{key}})
	if err != nil {
		return nil, s.fail(ctx, "get "+strconv.Quote(key), err)
	}
	return resp.Values[0], nil
}

// Wait waits until every key exists and returns their values, in the order
// of keys. When ctx ends first, the error wraps ctx.Err() and names the keys
// still missing.
func (s *Store) Wait(ctx context.Context, keys ...string) ([][]byte, error) {
	values, missing, err := s.wait(ctx, keys)
	if err != nil {
		return nil, s.fail(ctx, "wait", err)
	}
	if missing != nil {
		quoted := make([]string, len(missing))
		for i, k := range missing {
			quoted[i] = strconv.Quote(k)
		}
		return nil, fmt.Errorf("rendezvous: wait: keys %s still missing: %w", strings.Join(quoted, ", "), ctx.Err())
	}
	return values, nil
}

// wait is Wait that returns the missing keys (non-nil only when ctx ended)
// and the raw error of a failed call.
func (s *Store) wait(ctx context.Context, keys []string) (values [][]byte, missing []string, err error) {
	for _, k := range keys {
		checkKey(k)
	}
	if len(keys) == 0 {
		return nil, nil, nil
	}
	missing = keys
	for ctx.Err() == nil {
		req := &request{Keys: keys, Timeout: int64(pollTimeout(ctx))}
		resp, err := s.call(ctx, methodWait, req)
		if err != nil {
			if ended(ctx, err) {
				break
			}
			return nil, nil, err
		}
		if len(resp.Missing) == 0 {
			return resp.Values, nil, nil
		}
		missing = resp.Missing
	}
	// Whether the reply of the last call came before ctx ended is a matter
	// of timing: ask once more, without waiting, under a context of its own.
	dctx, cancel := context.WithTimeout(context.Background(), diagnoseTimeout)
	defer cancel()
	resp, err := s.call(dctx, methodWait, &request{Keys: keys, Timeout: -1}, grpc.WaitForReady(false))
	switch {
	case err == nil && len(resp.Missing) == 0:
		return resp.Values, nil, nil // every key arrived as ctx ended
	case err == nil:
		missing = resp.Missing
	}
	return nil, missing, nil
}

// Add adds delta to the counter at key and returns the new value. A missing
// key counts as 0; the counter is stored as a decimal integer, so Get
// returns it as text. A key holding anything else gives ErrNotCounter; a
// sum outside int64 gives ErrLimit and leaves the counter as it was.
func (s *Store) Add(ctx context.Context, key string, delta int64) (int64, error) {
	checkKey(key)
	resp, err := s.call(ctx, methodAdd, &request{Keys: []string{key}, Delta: delta})
	if err != nil {
		return 0, s.fail(ctx, "add "+strconv.Quote(key), err)
	}
	return resp.Counter, nil
}

// Sequence returns how many times Sequence was called before with name on
// this Store: 0, then 1, 2, .... Ranks that make the same calls in the same
// order get the same numbers, which lets them build fresh keys for repeated
// exchanges without talking to each other.
func (s *Store) Sequence(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.seqs[name]
	s.seqs[name] = n + 1
	return n
}

// Close leaves the run and closes the connection. On the rank that serves
// the store (rank 0 under Connect), Close first waits until every rank has
// closed its store or exited, at most Config.CloseTimeout, and then stops
// the server. Close may be called more than once.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.stopAttending()
	if s.server != nil {
		s.server.waitLeft(s.cfg.runID(), s.cfg.closeTimeout())
		s.server.Close()
	}
	return s.cc.Close()
}

// checkKey panics on an empty key (a programmer error).
func checkKey(key string) {
	if key == "" {
		panic("rendezvous: empty key")
	}
}
