package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distopt/distopt/collective/collectivetest"
)

// checkLeaks: see collectivetest.CheckGoroutines.
func checkLeaks(t *testing.T) { collectivetest.CheckGoroutines(t) }

// serve starts a server on a loopback port and returns its port.
func serve(t *testing.T) int {
	_, port := serveWith(t)
	return port
}

// serveWith starts a server on a loopback port with opts and returns it and
// its port.
func serveWith(t *testing.T, opts ...ServeOption) (*Server, int) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := Serve(lis, opts...)
	t.Cleanup(s.Close)
	return s, lis.Addr().(*net.TCPAddr).Port
}

// joined returns how many ranks of run have registered with s.
func (s *Server) joined(run string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.runs[run]; r != nil {
		return len(r.nonces)
	}
	return 0
}

func testConfig(rank, n, port int, run string) Config {
	return Config{Rank: rank, WorldSize: n, LocalWorldSize: n, LocalRank: rank, MasterAddr: "127.0.0.1", MasterPort: port, RunID: run, CloseTimeout: 2 * time.Second}
}

// joinAll connects cfgs concurrently with dial (Dial or Connect) and
// returns the stores and errors, indexed like cfgs.
func joinAll(ctx context.Context, cfgs []Config, dial func(context.Context, Config) (*Store, error)) ([]*Store, []error) {
	stores := make([]*Store, len(cfgs))
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	for i, c := range cfgs {
		wg.Go(func() { stores[i], errs[i] = dial(ctx, c) })
	}
	wg.Wait()
	return stores, errs
}

// world dials n ranks of run on a fresh server; they are closed at cleanup.
func world(t *testing.T, n int, run string) []*Store {
	_, stores := worldOn(t, n, run)
	return stores
}

// worldOn is world that also returns the server.
func worldOn(t *testing.T, n int, run string) (*Server, []*Store) {
	srv, _, stores := securedWorld(t, n, run, "")
	return srv, stores
}

// securedWorld dials n ranks of run, with secret, on a fresh server that
// requires it (none if empty); it returns the server, its port and the
// stores, which are closed at cleanup.
func securedWorld(t *testing.T, n int, run, secret string) (*Server, int, []*Store) {
	srv, port := serveWith(t, WithSecret(secret))
	cfgs := make([]Config, n)
	for r := range cfgs {
		cfgs[r] = testConfig(r, n, port, run)
		cfgs[r].Secret = secret
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stores, errs := joinAll(ctx, cfgs, Dial)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	t.Cleanup(func() { closeAll(stores) })
	return srv, port, stores
}

// cancelWhenWaiting cancels ctx (through cancel) once n calls are blocked
// in srv's wait, or ctx has ended: a deadline that comes at a known point,
// whatever the timing.
func cancelWhenWaiting(ctx context.Context, cancel context.CancelFunc, srv *Server, n int) {
	go func() {
		for ctx.Err() == nil {
			srv.mu.Lock()
			w := srv.waiting
			srv.mu.Unlock()
			if w >= n {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
	}()
}

func closeAll(stores []*Store) {
	var wg sync.WaitGroup
	for _, s := range stores {
		if s != nil {
			wg.Go(func() { _ = s.Close() })
		}
	}
	wg.Wait()
}

func TestSetGetWait(t *testing.T) {
	checkLeaks(t)
	s := world(t, 2, "sgw")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s[0].Get(ctx, "k"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of missing key: %v", err)
	}
	got := make(chan [][]byte, 1)
	go func() {
		v, err := s[1].Wait(ctx, "k", "k2")
		if err != nil {
			t.Error(err)
		}
		got <- v
	}()
	time.Sleep(50 * time.Millisecond)
	select {
	case v := <-got:
		t.Fatalf("Wait returned %q before the keys were set", v)
	default:
	}
	if err := s[0].Set(ctx, "k", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	if err := s[0].Set(ctx, "k2", nil); err != nil {
		t.Fatal(err)
	}
	if v := <-got; len(v) != 2 || string(v[0]) != "v1" || len(v[1]) != 0 {
		t.Fatalf("Wait = %q", v)
	}
	if err := s[1].Set(ctx, "k", []byte("v2")); err != nil {
		t.Fatal(err)
	}
	if v, err := s[0].Get(ctx, "k"); err != nil || string(v) != "v2" {
		t.Fatalf("Get after overwrite = %q, %v", v, err)
	}
}

// TestWaitDeadlineNamesKeys: a Wait whose context ends names the keys
// still missing then, and only those, however late its last reply was (the
// context is canceled once the Wait blocks on the server).
func TestWaitDeadlineNamesKeys(t *testing.T) {
	checkLeaks(t)
	srv, s := worldOn(t, 1, "deadline")
	if err := s[0].Set(context.Background(), "here", []byte{1}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cancelWhenWaiting(ctx, cancel, srv, 1)
	_, err := s[0].Wait(ctx, "here", "absent")
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), `"absent"`) || strings.Contains(err.Error(), `"here"`) {
		t.Fatalf("Wait = %v", err)
	}
}

// TestAddAtomic: concurrent increments from every rank return each value of
// 1..total exactly once.
func TestAddAtomic(t *testing.T) {
	checkLeaks(t)
	const n, per = 3, 40
	s := world(t, n, "add")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var mu sync.Mutex
	var seen []int64
	var wg sync.WaitGroup
	for r := range n {
		for range 2 {
			wg.Go(func() {
				for range per / 2 {
					v, err := s[r].Add(ctx, "ctr", 1)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					seen = append(seen, v)
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	slices.Sort(seen)
	for i, v := range seen {
		if v != int64(i+1) {
			t.Fatalf("counter values %v are not 1..%d", seen, n*per)
		}
	}
	if v, err := s[0].Add(ctx, "ctr", -5); err != nil || v != n*per-5 {
		t.Fatalf("Add(-5) = %d, %v", v, err)
	}
	if v, err := s[1].Get(ctx, "ctr"); err != nil || string(v) != fmt.Sprint(n*per-5) {
		t.Fatalf("Get counter = %q, %v", v, err)
	}
	if err := s[0].Set(ctx, "text", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := s[0].Add(ctx, "text", 1); !errors.Is(err, ErrNotCounter) {
		t.Fatalf("Add on text = %v", err)
	}
}

func TestRunsDoNotMix(t *testing.T) {
	checkLeaks(t)
	port := serve(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := Dial(ctx, testConfig(0, 1, port, "a"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Dial(ctx, testConfig(0, 1, port, "b"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := a.Set(ctx, "k", []byte("from a")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(ctx, "k"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("run b sees run a's key: %v", err)
	}
}

func TestJoinFailures(t *testing.T) {
	tests := []struct {
		name    string
		cfgs    func(port int) []Config
		timeout time.Duration
		// cancelAt, if not zero: the context is canceled once that many
		// ranks have registered with the server, whatever the timing.
		cancelAt int
		is       error
		want     []string // in the error of every rank
	}{
		{
			name: "world size differs",
			cfgs: func(port int) []Config {
				c := []Config{testConfig(0, 3, port, "ws"), testConfig(1, 3, port, "ws"), testConfig(2, 4, port, "ws")}
				return c
			},
			timeout: 10 * time.Second, is: ErrMembership,
			want: []string{"WORLD_SIZE differs between ranks", "rank 2 has WORLD_SIZE=4"},
		},
		{
			name: "rank twice",
			cfgs: func(port int) []Config {
				return []Config{testConfig(0, 3, port, "dup"), testConfig(1, 3, port, "dup"), testConfig(1, 3, port, "dup")}
			},
			timeout: 10 * time.Second, is: ErrMembership,
			want: []string{"two processes joined as rank 1"},
		},
		{
			name: "rank never starts",
			cfgs: func(port int) []Config {
				return []Config{testConfig(0, 4, port, "miss"), testConfig(1, 4, port, "miss"), testConfig(3, 4, port, "miss")}
			},
			timeout: 60 * time.Second, cancelAt: 3, is: context.Canceled,
			want: []string{"ranks [2] of 4 never joined"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checkLeaks(t)
			srv, port := serveWith(t)
			ctx, cancel := context.WithTimeout(context.Background(), tc.timeout)
			defer cancel()
			if tc.cancelAt > 0 {
				go func() {
					for srv.joined(tc.cfgs(port)[0].RunID) < tc.cancelAt && ctx.Err() == nil {
						time.Sleep(5 * time.Millisecond)
					}
					cancel()
				}()
			}
			stores, errs := joinAll(ctx, tc.cfgs(port), Dial)
			defer closeAll(stores)
			for r, err := range errs {
				if !errors.Is(err, tc.is) {
					t.Errorf("process %d: error %v, want %v", r, err, tc.is)
					continue
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("process %d: error %q does not say %q", r, err, w)
					}
				}
			}
		})
	}
}

// TestConnectRankNeverStarts is rank_never_starts through Connect, where
// rank 0 serves the store itself, and its deadline comes first, as in a
// real job: rank 0 gives up and must keep serving until the others, whose
// deadlines come once it has, have asked who is missing. Before, rank 0
// stopped at once and the others said the store could not be reached.
func TestConnectRankNeverStarts(t *testing.T) {
	checkLeaks(t)
	port := freeTCPPort(t)
	served := make(chan *Server, 1)
	serveHook = func(s *Server) { served <- s }
	defer func() { serveHook = nil }()
	ctx0, cancel0 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel0()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() {
		defer cancel()
		var srv *Server
		select {
		case srv = <-served:
		case <-ctx.Done():
			return
		}
		for srv.joined("miss") < 3 && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		cancel0()
		for !srv.diagnosedBy("miss", 0) && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
	}()
	cfgs := []Config{testConfig(0, 4, port, "miss"), testConfig(1, 4, port, "miss"), testConfig(3, 4, port, "miss")}
	stores := make([]*Store, len(cfgs))
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	for i, c := range cfgs {
		wg.Go(func() {
			if c.Rank == 0 {
				stores[i], errs[i] = Connect(ctx0, c)
			} else {
				stores[i], errs[i] = Connect(ctx, c)
			}
		})
	}
	wg.Wait()
	defer closeAll(stores)
	for r, err := range errs {
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "ranks [2] of 4 never joined") {
			t.Errorf("process %d: %v", r, err)
		}
	}
}

// diagnosedBy reports whether rank of run has asked who is missing.
func (s *Server) diagnosedBy(run string, rank int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.runs[run]
	return r != nil && r.diagnosed[rank]
}

func TestStoreUnreachable(t *testing.T) {
	checkLeaks(t)
	port := closedPort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := Dial(ctx, testConfig(1, 2, port, "x"))
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "could not be reached (dial tcp") ||
		!strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Dial = %v", err)
	}
}

func TestConnectPortInUse(t *testing.T) {
	checkLeaks(t)
	lis, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	port := lis.Addr().(*net.TCPAddr).Port
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = Connect(ctx, testConfig(0, 2, port, "p"))
	if !errors.Is(err, ErrPortInUse) || !strings.Contains(err.Error(), fmt.Sprintf("port %d", port)) {
		t.Fatalf("Connect = %v", err)
	}
}

// TestConnectCloseWaits: Connect serves on rank 0, and rank 0's Close waits
// for the other ranks to close before stopping the server.
func TestConnectCloseWaits(t *testing.T) {
	checkLeaks(t)
	lis, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	port := lis.Addr().(*net.TCPAddr).Port
	lis.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfgs := []Config{testConfig(0, 2, port, "cw"), testConfig(1, 2, port, "cw")}
	cfgs[0].CloseTimeout = 10 * time.Second
	stores, errs := joinAll(ctx, cfgs, Connect)
	if errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	closed := make(chan struct{})
	go func() { stores[0].Close(); close(closed) }()
	time.Sleep(100 * time.Millisecond)
	select {
	case <-closed:
		t.Fatal("rank 0 closed its server while rank 1 was still connected")
	default:
	}
	// Rank 1 can still use the store, then leaves.
	if err := stores[1].Set(ctx, "late", []byte{1}); err != nil {
		t.Fatal(err)
	}
	stores[1].Close()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("rank 0's Close did not return after rank 1 left")
	}
	if err := stores[1].Set(ctx, "after", nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Set after Close = %v", err)
	}
}
