package grpccomm

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/collectivetest"
	"github.com/distopt/distopt/collective/rendezvous"
)

// securedPair connects two ranks whose job has secret; it returns the
// communicators and the address of rank 1's endpoint.
func securedPair(t *testing.T, secret string) ([]*Comm, string) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := rendezvous.Serve(lis, rendezvous.WithSecret(secret))
	port := lis.Addr().(*net.TCPAddr).Port
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stores := make([]*rendezvous.Store, 2)
	comms := make([]*Comm, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() {
			rc := rendezvous.Config{Rank: r, WorldSize: 2, LocalRank: r, LocalWorldSize: 2, MasterAddr: "127.0.0.1",
				MasterPort: port, RunID: "sec", Secret: secret, CloseTimeout: time.Second}
			if stores[r], errs[r] = rendezvous.Dial(ctx, rc); errs[r] == nil {
				comms[r], errs[r] = New(ctx, stores[r], Config{})
			}
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for r := range 2 {
			wg.Go(func() {
				if comms[r] != nil {
					comms[r].Close()
				}
				if stores[r] != nil {
					stores[r].Close()
				}
			})
		}
		wg.Wait()
		srv.Close()
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	addr, err := stores[0].Get(ctx, "rendezvous/allgather/grpccomm/"+comms[0].id+"/addr/0/1")
	if err != nil {
		t.Fatal(err)
	}
	return comms, string(addr)
}

// hello opens a stream to the endpoint at addr as an outsider presenting
// secret (none if empty) and says hello as rank from for communicator id;
// it returns the error that ends the exchange.
func outsiderHello(ctx context.Context, t *testing.T, addr, secret string, from int, id string) error {
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		rendezvous.AuthDialOption(secret), grpc.WithDefaultCallOptions(grpc.ForceCodecV2(frameCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	stream, err := cc.NewStream(ctx, &serviceDesc.Streams[0], methodName)
	if err != nil {
		return err
	}
	h := header{typ: frameHello, index: uint32(from), count: 2, root: 1}
	// SendMsg returns io.EOF when the server has already ended the stream
	// (a refusal can beat the hello on a busy machine); the status then
	// comes from RecvMsg, as gRPC documents.
	if err := stream.SendMsg(newOutFrame(&h, []byte(id))); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	var f inFrame
	err = stream.RecvMsg(&f)
	f.free()
	return err
}

// TestPeerOutsiderRefused: an endpoint refuses a caller without the job's
// secret with "unauthenticated" alone; a caller with the secret but the
// wrong communicator learns nothing of the real id; the communicator goes on
// working after both.
func TestPeerOutsiderRefused(t *testing.T) {
	collectivetest.CheckGoroutines(t)
	comms, addr := securedPair(t, "peer-secret")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, wrong := range []string{"", "guess"} {
		err := outsiderHello(ctx, t, addr, wrong, 0, comms[1].id)
		if st := status.Convert(err); st.Code() != codes.Unauthenticated || st.Message() != "unauthenticated" {
			t.Errorf("secret %q: %v, want Unauthenticated and nothing more", wrong, err)
		}
	}
	err := outsiderHello(ctx, t, addr, "peer-secret", 0, "guess")
	if st := status.Convert(err); st.Code() != codes.FailedPrecondition || strings.Contains(st.Message(), comms[1].id) ||
		!strings.Contains(st.Message(), `"guess"`) {
		t.Errorf("wrong communicator: %v; want a refusal that quotes the caller's id and not the real one (%q)", err, comms[1].id)
	}
	// The job is intact: an all-reduce still sums both ranks.
	checkSum(ctx, t, comms)
}

// checkSum checks that an all-reduce still sums the ranks of comms.
func checkSum(ctx context.Context, t *testing.T, comms []*Comm) {
	t.Helper()
	var wg sync.WaitGroup
	sums := make([]float64, 2)
	errs := make([]error, 2)
	for r, c := range comms {
		wg.Go(func() {
			b := make(buffer.HostBuffer, 8)
			binary.LittleEndian.PutUint64(b, math.Float64bits(float64(r+1)))
			errs[r] = collective.AllReduce(ctx, c, b, b, buffer.Float64, collective.Sum)
			sums[r] = math.Float64frombits(binary.LittleEndian.Uint64(b))
		})
	}
	wg.Wait()
	for r := range 2 {
		if errs[r] != nil || sums[r] != 3 {
			t.Errorf("rank %d after the attacks: sum %v, %v", r, sums[r], errs[r])
		}
	}
}

// TestLossMsg: a link that ended without a word from the peer says the peer
// stopped responding and since when; other breaks keep their cause.
func TestLossMsg(t *testing.T) {
	p := &peer{rank: 1}
	at := time.Now().Add(-9 * time.Second)
	p.heard.Store(at.UnixNano())
	since := "nothing received from it since " + at.Format("15:04:05.000")
	for _, tc := range []struct {
		err  error
		want []string
	}{
		{context.Canceled, []string{"stopped responding", since, "context canceled", "7s of silence"}},
		{status.Error(codes.Canceled, "context canceled"), []string{"stopped responding", since}},
		{status.Error(codes.Unavailable, "keepalive ping failed to receive ACK within timeout"), []string{"stopped responding", since}},
		{status.Error(codes.Unavailable, "error reading from server: EOF"), []string{"peer lost: error reading from server: EOF; " + since}},
	} {
		got := lossMsg(p, tc.err, 7*time.Second)
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("lossMsg(%v) = %q, want %q in it", tc.err, got, w)
			}
		}
	}
	if got := lossMsg(&peer{}, context.Canceled, time.Second); !strings.Contains(got, "nothing received from it yet") {
		t.Errorf("never heard: %q", got)
	}
}

// TestLocalHost: the endpoint listens on loopback for a master on loopback,
// and an unresolvable master is an error naming DNS (before: loopback, where
// peers on other hosts could not connect).
func TestLocalHost(t *testing.T) {
	for _, master := range []string{"127.0.0.1:29500", "localhost:29500"} {
		host, err := localHost(master)
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			t.Errorf("localHost(%s) = %q, %v; want a loopback address", master, host, err)
		}
	}
	if host, err := localHost("no-such-host.invalid:29500"); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "DNS") {
		t.Errorf("unresolvable master: %q, %v", host, err)
	}
}

// TestPeerIdleConnsBounded: gRPC connections to a rank's endpoint that
// make no call (they answer the endpoint's keepalive pings) and carry no
// token are bounded: one past rendezvous.MaxPendingConns closes the
// oldest, and the communicator goes on working.
func TestPeerIdleConnsBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("opens a thousand connections")
	}
	collectivetest.CheckGoroutines(t)
	comms, addr := securedPair(t, "peer-secret")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var conns []*grpc.ClientConn
	defer func() {
		for _, cc := range conns {
			cc.Close()
		}
	}()
	for range rendezvous.MaxPendingConns + 1 {
		cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, cc)
		cc.Connect()
		if !waitState(ctx, cc, connectivity.Ready) {
			t.Fatalf("connection %d never ready: %v", len(conns), cc.GetState())
		}
	}
	// The oldest is closed: its channel leaves READY and, with no call to
	// make, does not connect again.
	if !waitState(ctx, conns[0], connectivity.Idle) {
		t.Fatalf("the oldest of %d idle connections is still %v", len(conns), conns[0].GetState())
	}
	checkSum(ctx, t, comms)
}

// waitState waits until cc is in state want or ctx ends.
func waitState(ctx context.Context, cc *grpc.ClientConn, want connectivity.State) bool {
	for s := cc.GetState(); s != want; s = cc.GetState() {
		if !cc.WaitForStateChange(ctx, s) {
			return false
		}
	}
	return true
}
