package grpccomm

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective/rendezvous"
)

// Comm is one rank's communicator. It implements collective.Communicator
// for buffer.HostBuffer buffers.
type Comm struct {
	rank, size int
	cfg        Config
	id         string // names the communicator in handshakes and store keys
	secret     string // the job's secret (rendezvous.Config.Secret)

	server *grpc.Server       // nil when size is 1
	ctx    context.Context    // of the outbound streams
	cancel context.CancelFunc // cancels ctx: cuts the outbound streams
	wg     sync.WaitGroup     // goroutines of the communicator (gRPC's handlers aside)

	mu      sync.Mutex
	cond    *sync.Cond // signalled on any change below
	peers   []*peer    // indexed by rank; nil at this rank
	ready   int        // outbound streams acked plus inbound streams accepted
	groups  map[uint64]*group
	nextSeq uint64
	failure *failure      // why the communicator stopped; nil while usable
	dead    chan struct{} // closed when failure is set
	closing bool
	torn    chan struct{} // closed once Close has released everything
}

// peer is the state of the link with one other rank.
type peer struct {
	rank    int
	cc      *grpc.ClientConn  // to the peer's server
	out     grpc.ClientStream // this rank's frames for the peer; nil until acked
	dialErr error             // why out could not be opened
	inbound bool              // the peer's stream to this rank is accepted
	gone    string            // set once the peer has closed: no more frames
	drained chan struct{}     // closed when the peer has ended out
	heard   atomic.Int64      // when the last frame from the peer arrived (Unix ns; 0: never)
}

// New connects this rank to the other ranks of store's job and returns its
// communicator. Every rank serves a gRPC endpoint, publishes its address
// through store, and opens one stream to every other rank; New returns once
// all streams in both directions are up. With one rank, nothing is opened.
//
// Errors: ErrConfig for an invalid cfg; ErrHandshake when a peer belongs to
// another communicator (see Config.Name); an error wrapping ctx.Err() that
// names the ranks that did not connect in time.
func New(ctx context.Context, store *rendezvous.Store, cfg Config) (*Comm, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	rc := store.Config()
	id := fmt.Sprintf("%s/%s/%d", rc.RunID, cfg.Name, store.Sequence("grpccomm/"+cfg.Name))
	c := newComm(store.Rank(), store.Size(), id, cfg, rc.Secret)
	exchange := func(ctx context.Context, addr string) ([][]byte, error) {
		return store.AllGatherValues(ctx, "grpccomm/"+id+"/addr", []byte(addr))
	}
	if err := c.connect(ctx, rc.MasterAddress(), exchange); err != nil {
		return nil, err
	}
	return c, nil
}

// newComm returns the communicator of rank of size ranks named id, not
// yet connected.
func newComm(rank, size int, id string, cfg Config, secret string) *Comm {
	c := &Comm{
		rank:   rank,
		size:   size,
		cfg:    cfg,
		id:     id,
		secret: secret,
		peers:  make([]*peer, size),
		groups: make(map[uint64]*group),
		dead:   make(chan struct{}),
		torn:   make(chan struct{}),
	}
	c.cond = sync.NewCond(&c.mu)
	c.ctx, c.cancel = context.WithCancel(context.Background())
	return c
}

// connect serves this rank's endpoint, publishes its address and learns
// the others' through exchange (which returns every rank's address,
// indexed by rank), and opens the streams to every peer; it returns once
// all are up. With one rank, nothing is opened. master is the store's
// address, from which the default listening host is found.
func (c *Comm) connect(ctx context.Context, master string, exchange func(ctx context.Context, addr string) ([][]byte, error)) error {
	if c.size == 1 {
		return nil
	}
	for r := range c.peers {
		if r != c.rank {
			c.peers[r] = &peer{rank: r, drained: make(chan struct{})}
		}
	}
	host := c.cfg.Host
	if host == "" {
		var err error
		if host, err = localHost(master); err != nil {
			return fmt.Errorf("grpccomm: rank %d: %w (set Config.Host to the address to listen on)", c.rank, err)
		}
	}
	lis, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return fmt.Errorf("grpccomm: rank %d: listening on %s: %w", c.rank, host, err)
	}
	// Outsiders' idle connections are bounded (rendezvous.Guard).
	guarded, auth := rendezvous.Guard(lis, c.secret)
	c.server = c.newServer(auth)
	c.wg.Go(func() { _ = c.server.Serve(guarded) })

	addrs, err := exchange(ctx, lis.Addr().String())
	if err != nil {
		c.abandon()
		return fmt.Errorf("grpccomm: rank %d: exchanging addresses: %w", c.rank, err)
	}
	for _, p := range c.peers {
		if p != nil {
			c.wg.Go(func() { c.dial(p, string(addrs[p.rank])) })
		}
	}
	if err := c.waitReady(ctx); err != nil {
		c.abandon()
		return err
	}
	return nil
}

// newServer returns the gRPC server of this rank's endpoint.
func (c *Comm) newServer(auth grpc.ServerOption) *grpc.Server {
	cfg := c.cfg
	s := grpc.NewServer(
		grpc.ForceServerCodecV2(frameCodec{}),
		grpc.WaitForHandlers(true),
		auth, // callers without the job's secret are refused
		grpc.MaxConcurrentStreams(uint32(2*c.size)),
		grpc.MaxRecvMsgSize(cfg.ChunkBytes+headerLen+1024),
		grpc.InitialWindowSize(int32(cfg.StreamWindow)),
		grpc.InitialConnWindowSize(int32(cfg.StreamWindow)),
		grpc.ReadBufferSize(256<<10),
		grpc.WriteBufferSize(256<<10),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: cfg.KeepaliveTime, Timeout: cfg.KeepaliveTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Second, PermitWithoutStream: true}),
	)
	s.RegisterService(&serviceDesc, c)
	return s
}

// localHost returns the local IP address from which this host reaches
// master (no packet is sent): loopback for a job on one host, the
// interface towards rank 0's host otherwise, and nowhere else. A master
// that cannot be resolved or routed to is an error, not a silent fallback
// to loopback that peers on other hosts could not reach.
func localHost(master string) (string, error) {
	conn, err := net.Dial("udp", master)
	if err != nil {
		return "", fmt.Errorf("no local address reaches MASTER_ADDR %s (DNS or routing): %v: %w", master, err, ErrConfig)
	}
	defer conn.Close()
	return conn.LocalAddr().(*net.UDPAddr).IP.String(), nil
}

// dial opens this rank's stream to p and says hello; once acked, it starts
// p's sender and watcher.
func (c *Comm) dial(p *peer, addr string) {
	cc, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		rendezvous.AuthDialOption(c.secret),
		grpc.WithInitialWindowSize(int32(c.cfg.StreamWindow)),
		grpc.WithInitialConnWindowSize(int32(c.cfg.StreamWindow)),
		grpc.WithReadBufferSize(256<<10),
		grpc.WithWriteBufferSize(256<<10),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: c.cfg.KeepaliveTimeout, PermitWithoutStream: true}),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(frameCodec{})),
	)
	if err == nil {
		c.mu.Lock()
		if c.failure != nil { // teardown may have collected the connections already
			c.mu.Unlock()
			_ = cc.Close()
			return
		}
		p.cc = cc
		c.mu.Unlock()
		err = c.hello(p, cc)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		p.dialErr = err
		c.cond.Broadcast()
		return
	}
	c.ready++
	c.cond.Broadcast()
	c.wg.Go(func() { c.sendLoop(p) })
	c.wg.Go(func() { c.watch(p) })
}

// hello opens the stream to p and waits for p's ack.
func (c *Comm) hello(p *peer, cc *grpc.ClientConn) error {
	stream, err := cc.NewStream(c.ctx, &serviceDesc.Streams[0], methodName, grpc.WaitForReady(true))
	if err != nil {
		return err
	}
	h := header{typ: frameHello, index: uint32(c.rank), count: uint32(c.size), root: uint32(p.rank)}
	if err := stream.SendMsg(newOutFrame(&h, []byte(c.id))); err != nil {
		return fmt.Errorf("sending hello: %w", err)
	}
	var ack inFrame
	if err := stream.RecvMsg(&ack); err != nil {
		return err
	}
	ack.free()
	if ack.typ != frameAck {
		return fmt.Errorf("frame of type %d instead of an ack: %w", ack.typ, ErrHandshake)
	}
	c.mu.Lock()
	p.out = stream
	c.mu.Unlock()
	return nil
}

// accept reads a peer's hello on a new inbound stream, checks that it
// belongs to this communicator and acks it.
func (c *Comm) accept(stream grpc.ServerStream) (*peer, error) {
	var f inFrame
	if err := stream.RecvMsg(&f); err != nil {
		return nil, err
	}
	defer f.free()
	if err := checkHello(&f, c.id, c.size, c.rank); err != nil {
		return nil, err
	}
	from := int(f.index)
	c.mu.Lock()
	p := c.peers[from]
	switch {
	case c.failure != nil:
		c.mu.Unlock()
		if err := c.endStatus(); err != nil {
			return nil, err
		}
		return nil, status.Error(codes.Unavailable, "communicator closed")
	case p.inbound:
		c.mu.Unlock()
		return nil, handshakeStatus("rank %d connected twice", from)
	}
	p.inbound = true
	p.heard.Store(time.Now().UnixNano())
	c.ready++
	c.cond.Broadcast()
	c.mu.Unlock()
	ack := header{typ: frameAck}
	if err := stream.SendMsg(newOutFrame(&ack, nil)); err != nil {
		return nil, err
	}
	return p, nil
}

// checkHello checks that f is the hello of another rank of the
// communicator id of size ranks, addressed to rank. The refusals describe
// the caller's hello, never the communicator's id: a caller learns nothing
// it did not send.
func checkHello(f *inFrame, id string, size, rank int) error {
	from := int(f.index)
	switch {
	case f.typ != frameHello:
		return handshakeStatus("first frame has type %d, not hello", f.typ)
	case string(f.payload) != id || int(f.count) != size || int(f.root) != rank:
		return handshakeStatus("the hello of rank %d of %d ranks for communicator %q, addressed to rank %d, does not match the communicator it reached (Config.Name, the order of New calls or the world size differ)",
			from, f.count, f.payload, f.root)
	case from < 0 || from >= size || from == rank:
		return handshakeStatus("hello from rank %d, outside the communicator", from)
	}
	return nil
}

// waitReady waits until every stream is up, a handshake fails, or ctx ends.
func (c *Comm) waitReady(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() {
		c.mu.Lock()
		c.cond.Broadcast()
		c.mu.Unlock()
	})
	defer stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		for _, p := range c.peers {
			if p != nil && p.dialErr != nil {
				return fmt.Errorf("grpccomm: rank %d: connecting to rank %d: %w", c.rank, p.rank, handshakeErr(p.dialErr))
			}
		}
		switch {
		case c.ready == 2*(c.size-1):
			return nil
		case c.failure != nil:
			return c.groupErr(c.failure, "connect")
		case ctx.Err() != nil:
			var missing []string
			for _, p := range c.peers {
				if p != nil && (p.out == nil || !p.inbound) {
					missing = append(missing, strconv.Itoa(p.rank))
				}
			}
			return fmt.Errorf("grpccomm: rank %d: ranks [%s] did not connect: %w", c.rank, strings.Join(missing, " "), ctx.Err())
		}
		c.cond.Wait()
	}
}

// Rank returns this rank.
func (c *Comm) Rank() int { return c.rank }

// Size returns the number of ranks.
func (c *Comm) Size() int { return c.size }

// Memory returns buffer.Host.
func (c *Comm) Memory() buffer.MemoryKind { return buffer.Host }

// Close releases the communicator. If no operation is in flight and the
// communicator is usable, Close first lets every peer take the frames this
// rank sent (at most Config.CloseTimeout); otherwise the operations in
// flight fail with collective.ErrClosed and the peers see this rank lost.
// Close returns after every goroutine, stream, connection and the server of
// the communicator have ended. It may be called more than once.
func (c *Comm) Close() error {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		<-c.torn
		return nil
	}
	c.closing = true
	graceful := c.failure == nil && len(c.groups) == 0
	c.failLocked(&failure{rank: c.rank, msg: "closed its communicator", closed: true, graceful: graceful})
	c.mu.Unlock()
	if graceful {
		timeout := time.NewTimer(c.cfg.CloseTimeout)
		defer timeout.Stop()
	drain:
		for _, p := range c.peers {
			if p != nil {
				select {
				case <-p.drained:
				case <-timeout.C:
					break drain
				}
			}
		}
	}
	c.teardown()
	close(c.torn)
	return nil
}

// abandon tears down a communicator that New gives up on.
func (c *Comm) abandon() {
	c.fail(&failure{rank: c.rank, msg: "gave up connecting"})
	c.teardown()
}

// teardown cuts every stream and connection, stops the server and waits for
// every goroutine of the communicator. c.failure must be set.
func (c *Comm) teardown() {
	c.cancel()
	c.mu.Lock()
	var conns []*grpc.ClientConn
	for _, p := range c.peers {
		if p != nil && p.cc != nil {
			conns = append(conns, p.cc)
		}
	}
	c.mu.Unlock()
	for _, cc := range conns {
		_ = cc.Close()
	}
	if c.server != nil {
		// Let the handlers return their status first: after a failure it
		// names the rank this one blames, which is how every survivor names
		// the same culprit. They return at once (c.failure is set); Stop
		// cuts whatever is left after stopGrace.
		stopped := make(chan struct{})
		go func() {
			c.server.GracefulStop()
			close(stopped)
		}()
		t := time.NewTimer(stopGrace)
		select {
		case <-stopped:
		case <-t.C:
			c.server.Stop()
			<-stopped
		}
		t.Stop()
	}
	c.wg.Wait()
}

// stopGrace bounds how long teardown waits for the server's handlers to
// send their final status.
const stopGrace = time.Second
