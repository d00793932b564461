package rendezvous

import (
	"container/list"
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/tap"
)

// Bounds of the connections of a server guarded by Guard (the store, and the
// peer endpoints of collective/grpccomm). A connection is trusted once it
// has made one call that passed authentication: every client of a job
// makes its first call right after connecting. Until then it is pending.
const (
	// FirstCallTimeout bounds how long a pending connection stays open: one
	// that has made no authenticated call by then is closed.
	FirstCallTimeout = 30 * time.Second
	// MaxPendingConns bounds the pending connections: a new one past it
	// closes the oldest pending one, so that idle outsiders cannot lock
	// the ranks out.
	MaxPendingConns = 1024
	// MaxConns bounds the open connections of a server, pending and
	// trusted: a new connection past it is closed at once.
	MaxConns = 2 * MaxWorldSize
)

// guardLog receives the guard's warnings (a variable for the tests).
var guardLog = slog.Default

// Guard wraps lis so that a gRPC server serving on it bounds its
// connections (FirstCallTimeout, MaxPendingConns, MaxConns). The returned
// server option, which the server must take, refuses every call without
// the token of secret (as AuthServerOption; with an empty secret every
// call passes) and marks the connection of a call that passes as trusted.
// Both the store and the peers of collective/grpccomm serve through it.
func Guard(lis net.Listener, secret string) (net.Listener, grpc.ServerOption) {
	g := newGuard(lis, FirstCallTimeout, MaxPendingConns, MaxConns)
	return g, g.serverOption(secret)
}

// guard is a listener whose connections are bounded; see Guard.
type guard struct {
	net.Listener
	timeout    time.Duration
	maxPending int
	maxConns   int

	mu       sync.Mutex
	open     int
	pending  *list.List // of *guardedConn, oldest first
	refused  int        // connections closed by a bound since the last warning
	accepted int        // connections accepted, ever
	dropped  int        // connections closed by a bound, ever
	lastWarn time.Time
}

func newGuard(lis net.Listener, timeout time.Duration, maxPending, maxConns int) *guard {
	return &guard{Listener: lis, timeout: timeout, maxPending: maxPending, maxConns: maxConns, pending: list.New()}
}

// Accept returns the next connection within the bounds.
func (g *guard) Accept() (net.Conn, error) {
	for {
		c, err := g.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if gc := g.admit(c); gc != nil {
			return gc, nil
		}
	}
}

// admit wraps c as a pending connection, or closes it if the server holds
// MaxConns. It closes the oldest pending connection if c is one too many.
func (g *guard) admit(c net.Conn) *guardedConn {
	g.mu.Lock()
	g.accepted++
	if g.open >= g.maxConns {
		g.dropped++
		g.mu.Unlock()
		_ = c.Close()
		g.warn(fmt.Sprintf("rendezvous: closed a new connection: the server holds %d connections (MaxConns)", g.maxConns), "remote", c.RemoteAddr())
		return nil
	}
	gc := &guardedConn{Conn: c, g: g}
	gc.addr = guardedAddr{Addr: c.RemoteAddr(), conn: gc}
	gc.elem = g.pending.PushBack(gc)
	g.open++
	var evict *guardedConn
	if g.pending.Len() > g.maxPending {
		evict = g.pending.Front().Value.(*guardedConn)
	}
	gc.timer = time.AfterFunc(g.timeout, func() {
		gc.drop(fmt.Sprintf("made no authenticated call within %v (FirstCallTimeout)", g.timeout))
	})
	g.mu.Unlock()
	if evict != nil {
		evict.drop(fmt.Sprintf("was the oldest of more than %d without an authenticated call (MaxPendingConns)", g.maxPending))
	}
	return gc
}

// warn logs msg, at most once a second, saying how many connections were
// closed since the last warning.
func (g *guard) warn(msg string, args ...any) {
	g.mu.Lock()
	g.refused++
	now := time.Now()
	if now.Sub(g.lastWarn) < time.Second {
		g.mu.Unlock()
		return
	}
	n := g.refused
	g.refused, g.lastWarn = 0, now
	g.mu.Unlock()
	guardLog().Warn(msg, append(args, "closed_since_last_warning", n)...)
}

// serverOption returns the tap that authenticates every call (see
// AuthServerOption) and trusts the connection of a call that passes.
func (g *guard) serverOption(secret string) grpc.ServerOption {
	check := authenticator(secret)
	return grpc.InTapHandle(func(ctx context.Context, info *tap.Info) (context.Context, error) {
		if check != nil {
			if err := check(info); err != nil {
				return nil, err
			}
		}
		if p, ok := peer.FromContext(ctx); ok {
			if a, ok := p.Addr.(guardedAddr); ok {
				a.conn.trust()
			}
		}
		return ctx, nil
	})
}

// guardedConn is a connection accepted by a guard.
type guardedConn struct {
	net.Conn
	g     *guard
	addr  guardedAddr
	timer *time.Timer
	elem  *list.Element // in g.pending while pending; nil once trusted or closed
	once  sync.Once
}

// RemoteAddr returns the peer's address, marked so that the server's tap
// finds this connection (see guard.serverOption).
func (c *guardedConn) RemoteAddr() net.Addr { return c.addr }

// trust marks c as trusted: no bound of pending connections applies.
func (c *guardedConn) trust() {
	c.g.mu.Lock()
	defer c.g.mu.Unlock()
	if c.elem != nil {
		c.g.pending.Remove(c.elem)
		c.elem = nil
		c.timer.Stop()
	}
}

// drop closes c if it is still pending; why completes the warning.
func (c *guardedConn) drop(why string) {
	c.g.mu.Lock()
	pending := c.elem != nil
	if pending {
		c.g.pending.Remove(c.elem)
		c.elem = nil
		c.timer.Stop()
		c.g.dropped++
	}
	c.g.mu.Unlock()
	if pending {
		_ = c.Close()
		c.g.warn("rendezvous: closed a connection that "+why, "remote", c.addr)
	}
}

// Close closes the connection and counts it out of the guard.
func (c *guardedConn) Close() error {
	c.once.Do(func() {
		c.g.mu.Lock()
		if c.elem != nil {
			c.g.pending.Remove(c.elem)
			c.elem = nil
			c.timer.Stop()
		}
		c.g.open--
		c.g.mu.Unlock()
	})
	return c.Conn.Close()
}

// guardedAddr is the remote address of a guardedConn.
type guardedAddr struct {
	net.Addr
	conn *guardedConn
}
