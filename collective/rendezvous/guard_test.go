package rendezvous

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"math/big"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// withGuard lowers the bounds of a server's connections.
func withGuard(timeout time.Duration, maxPending, maxConns int) ServeOption {
	return func(o *serveOptions) {
		o.guard = func(lis net.Listener) *guard { return newGuard(lis, timeout, maxPending, maxConns) }
	}
}

// guardOf returns the guard of s's connections.
func (s *Server) guardOf() *guard { return s.lis.(*guard) }

// counts returns how many connections g holds, how many of them are
// pending and how many it closed by a bound.
func (g *guard) counts() (open, pending, dropped int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open, g.pending.Len(), g.dropped
}

func (g *guard) acceptedCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.accepted
}

// idleConn opens a connection to port that sends HTTP/2's preface and an
// empty SETTINGS frame, as a gRPC client does, and then nothing: no call,
// no token. It returns once the server has accepted it (g has accepted
// want connections).
func idleConn(t *testing.T, port int, g *guard, want int) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write(append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0, 0, 0, 4, 0, 0, 0, 0, 0)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for g.acceptedCount() < want {
		if time.Now().After(deadline) {
			t.Fatalf("server accepted %d connections, want %d", g.acceptedCount(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return c
}

// closedByServer reports whether the server closes c within 30 s: it reads
// (and drops) what the server sends until the end.
func closedByServer(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// guardedWorld dials n ranks of a job with a secret on a server whose
// connections g bounds; the stores are closed at cleanup.
func guardedWorld(t *testing.T, port, n int, secret string) []*Store {
	t.Helper()
	cfgs := make([]Config, n)
	for r := range cfgs {
		cfgs[r] = testConfig(r, n, port, "guarded")
		cfgs[r].Secret = secret
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stores, errs := joinAll(ctx, cfgs, Dial)
	t.Cleanup(func() { closeAll(stores) })
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return stores
}

// useAll makes each store set a key and read the others'.
func useAll(t *testing.T, stores []*Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for r, s := range stores {
		if err := s.Set(ctx, "k"+strconv.Itoa(r), []byte{byte(r)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range stores {
		for r := range stores {
			if v, err := s.Get(ctx, "k"+strconv.Itoa(r)); err != nil || !bytes.Equal(v, []byte{byte(r)}) {
				t.Fatalf("Get k%d = %v, %v", r, v, err)
			}
		}
	}
}

// TestIdleConnectionDropped is issue 38's third case: a connection that
// makes no call is closed after FirstCallTimeout (lowered here), while
// the ranks' connections, older than that, stay open.
func TestIdleConnectionDropped(t *testing.T) {
	checkLeaks(t)
	srv, port := serveWith(t, WithSecret("s"), withGuard(200*time.Millisecond, 1000, 1000))
	g := srv.guardOf()
	stores := guardedWorld(t, port, 2, "s")
	c := idleConn(t, port, g, g.acceptedCount()+1)
	if !closedByServer(c) {
		t.Fatal("the server kept an idle connection without a token open for 30 s")
	}
	useAll(t, stores)
	if _, pending, dropped := g.counts(); dropped != 1 || pending != 0 {
		t.Errorf("the server closed %d connections, %d pending, want 1 (the idle one) and 0", dropped, pending)
	}
}

// TestPendingConnsBounded: past MaxPendingConns (lowered here) idle
// connections, a new one closes the oldest, and the ranks still connect.
func TestPendingConnsBounded(t *testing.T) {
	checkLeaks(t)
	const bound, extra = 3, 2
	srv, port := serveWith(t, WithSecret("s"), withGuard(time.Hour, bound, 1000))
	g := srv.guardOf()
	var conns []net.Conn
	for i := range bound + extra {
		conns = append(conns, idleConn(t, port, g, i+1))
	}
	for i, c := range conns[:extra] {
		if !closedByServer(c) {
			t.Fatalf("idle connection %d of %d (bound %d) still open", i, len(conns), bound)
		}
	}
	if open, pending, dropped := g.counts(); open != bound || pending != bound || dropped != extra {
		t.Fatalf("server holds %d connections, %d pending, closed %d; want %d, %d, %d", open, pending, dropped, bound, bound, extra)
	}
	useAll(t, guardedWorld(t, port, 2, "s"))
}

// TestMaxConns: a server holding MaxConns (lowered here) connections
// closes a new one at once, and says so naming the bound.
func TestMaxConns(t *testing.T) {
	checkLeaks(t)
	var logged syncBuffer
	defer func(old func() *slog.Logger) { guardLog = old }(guardLog)
	guardLog = func() *slog.Logger { return slog.New(slog.NewTextHandler(&logged, nil)) }
	srv, port := serveWith(t, withGuard(time.Hour, 1000, 2))
	g := srv.guardOf()
	idleConn(t, port, g, 1)
	idleConn(t, port, g, 2)
	c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !closedByServer(c) {
		t.Fatal("a connection past MaxConns stayed open")
	}
	srv.Close()
	if want := "the server holds 2 connections (MaxConns)"; !strings.Contains(logged.String(), want) {
		t.Errorf("log lacks %q:\n%s", want, logged.String())
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestAddOverflow is issue 38's fourth case: Add whose sum leaves int64
// fails with ErrLimit and leaves the counter alone; every other sum is
// exact. Checked against math/big over the edges of int64.
func TestAddOverflow(t *testing.T) {
	checkLeaks(t)
	s := world(t, 1, "overflow")[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	edges := []int64{math.MinInt64, math.MinInt64 + 1, -2, -1, 0, 1, 2, math.MaxInt64 - 1, math.MaxInt64}
	for _, start := range edges {
		for _, delta := range edges {
			key := "c" + strconv.FormatInt(start, 10)
			if err := s.Set(ctx, key, []byte(strconv.FormatInt(start, 10))); err != nil {
				t.Fatal(err)
			}
			sum := new(big.Int).Add(big.NewInt(start), big.NewInt(delta))
			got, err := s.Add(ctx, key, delta)
			if sum.IsInt64() {
				if err != nil || got != sum.Int64() {
					t.Errorf("%d + %d = %d, %v; want %v", start, delta, got, err, sum)
				}
				continue
			}
			if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "overflows int64") {
				t.Errorf("%d + %d: %v, want ErrLimit naming the overflow", start, delta, err)
			}
			if v, err := s.Get(ctx, key); err != nil || string(v) != strconv.FormatInt(start, 10) {
				t.Errorf("after the refused %d + %d the counter holds %q, %v", start, delta, v, err)
			}
		}
	}
}
