package rendezvous

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// outsider is a client of the store at port that speaks its protocol but
// presents secret (none if empty): what anyone who can reach the port can
// send.
func outsider(t *testing.T, port int, secret string) *grpc.ClientConn {
	cc, err := grpc.NewClient("passthrough:///127.0.0.1:"+strconv.Itoa(port),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		AuthDialOption(secret),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(jsonCodec{}), grpc.WaitForReady(true)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// invoke makes one raw call.
func invoke(ctx context.Context, cc *grpc.ClientConn, method string, req *request) error {
	return cc.Invoke(ctx, "/"+serviceName+"/"+method, req, new(response))
}

// holding is what a server holds: bytes and keys stored, runs.
type holding struct {
	bytes int64
	keys  int
	runs  int
}

func (s *Server) holding() holding {
	s.mu.Lock()
	defer s.mu.Unlock()
	return holding{s.storedBytes, s.storedKeys, len(s.runs)}
}

// checkAlive: nothing of the attacks remains on the server (it holds what
// it held before them), and the job's ranks can still use the store.
func checkAlive(t *testing.T, srv *Server, stores []*Store, before holding) {
	t.Helper()
	if got := srv.holding(); got != before {
		t.Fatalf("server holds %+v after the attacks, %+v before", got, before)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make([]error, len(stores))
	var wg sync.WaitGroup
	for r, s := range stores {
		wg.Go(func() { errs[r] = s.Barrier(ctx, "alive") })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: live job broken: %v", r, err)
		}
	}
}

// TestOutsiderRefused: a client without the job's secret (none, or a wrong
// one) gets "unauthenticated" and nothing else from every method, and none
// of its calls changes the store: the attacks of issue 21 (joining as a
// live rank, 3 MB values, WORLD_SIZE = 10^7, keeping an attendance stream).
func TestOutsiderRefused(t *testing.T) {
	checkLeaks(t)
	const run, secret = "job", "the-job-secret"
	srv, port, stores := securedWorld(t, 1, run, secret)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	before := srv.holding()
	big := make([]byte, 3<<20)
	attacks := []struct {
		method string
		req    request
	}{
		{methodJoin, request{Run: run, Rank: 0, WorldSize: 1, Nonce: 42, Timeout: -1}},
		{methodJoin, request{Run: run, Rank: 0, WorldSize: 10_000_000, Timeout: -1}},
		{methodSet, request{Run: run, Keys: []string{"junk"}, Value: big}},
		{methodGet, request{Run: run, Keys: []string{"after"}}},
		{methodAdd, request{Run: run, Keys: []string{"n"}, Delta: 1}},
		{methodWait, request{Run: run, Keys: []string{"x"}, Timeout: -1}},
	}
	for _, wrong := range []string{"", "guess"} {
		cc := outsider(t, port, wrong)
		for _, a := range attacks {
			err := invoke(ctx, cc, a.method, &a.req)
			if st := status.Convert(err); st.Code() != codes.Unauthenticated || st.Message() != "unauthenticated" {
				t.Errorf("secret %q: %s: %v, want Unauthenticated that says nothing more", wrong, a.method, err)
			}
		}
		stream, err := cc.NewStream(ctx, &serviceDesc.Streams[0], "/"+serviceName+"/"+methodAttend)
		if err == nil {
			_ = stream.SendMsg(&request{Run: run})
			err = stream.RecvMsg(new(response))
		}
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("secret %q: attend: %v", wrong, err)
		}
	}
	checkAlive(t, srv, stores, before)

	// Through the package's own client, a wrong secret is named as such.
	cfg := testConfig(0, 1, port, run)
	cfg.Secret = "wrong"
	if _, err := Dial(ctx, cfg); !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), EnvSecret) {
		t.Fatalf("Dial with a wrong secret = %v", err)
	}
}

// TestMembersBounded: a rank that knows the secret still cannot break a
// live job or grow the server past its bounds.
func TestMembersBounded(t *testing.T) {
	checkLeaks(t)
	const run, secret = "job", "k"
	srv, port, stores := securedWorld(t, 2, run, secret)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	before := srv.holding()
	cc := outsider(t, port, secret)
	// Joining a complete run as one of its ranks, or with another
	// WORLD_SIZE, is refused to the caller alone.
	for _, req := range []request{
		{Run: run, Rank: 1, WorldSize: 2, Nonce: 7, Timeout: -1},
		{Run: run, Rank: 1, WorldSize: 3, Nonce: 7, Timeout: -1},
	} {
		if err := invoke(ctx, cc, methodJoin, &req); status.Code(err) != codes.FailedPrecondition {
			t.Errorf("join %+v of a complete run: %v", req, err)
		}
	}
	for _, tc := range []struct {
		method string
		req    request
		code   codes.Code
	}{
		{methodJoin, request{Run: run, Rank: 0, WorldSize: 10_000_000, Timeout: -1}, codes.InvalidArgument},
		{methodSet, request{Run: run, Keys: []string{"big"}, Value: make([]byte, maxValueBytes+1)}, codes.ResourceExhausted},
		{methodSet, request{Run: run, Keys: []string{strings.Repeat("k", maxKeyBytes+1)}}, codes.ResourceExhausted},
		{methodGet, request{Run: run, Rank: -1, Keys: []string{"k"}}, codes.InvalidArgument},
	} {
		if err := invoke(ctx, cc, tc.method, &tc.req); status.Code(err) != tc.code {
			t.Errorf("%s: %v, want %v", tc.method, err, tc.code)
		}
	}
	checkAlive(t, srv, stores, before)

	// Values up to the server's bound fit; the next one is refused with
	// ErrLimit and the store stays usable.
	srv.mu.Lock()
	srv.maxBytes = srv.storedBytes + 8*maxValueBytes // the bound, lowered to keep the test short
	srv.mu.Unlock()
	val := make([]byte, maxValueBytes)
	n := 7
	for i := range n {
		if err := stores[1].Set(ctx, "v"+strconv.Itoa(i), val); err != nil {
			t.Fatalf("value %d of %d: %v", i, n, err)
		}
	}
	var err error
	for i := n; err == nil && i < n+8; i++ {
		err = stores[1].Set(ctx, "v"+strconv.Itoa(i), val)
	}
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "store full") {
		t.Fatalf("Set past the bound = %v", err)
	}
	if err := stores[0].Set(ctx, "v0", nil); err != nil { // shrinking is allowed
		t.Fatal(err)
	}
	checkAlive(t, srv, stores, srv.holding())
}

// TestListensOnMasterAddrOnly: rank 0 serves on MASTER_ADDR's address only
// (loopback for a job on one host), and refuses an address of another host.
func TestListensOnMasterAddrOnly(t *testing.T) {
	checkLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, addr := range []string{"127.0.0.1", "localhost"} {
		cfg := testConfig(0, 1, freeTCPPort(t), "lo")
		cfg.MasterAddr = addr
		s, err := Connect(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		ip := s.server.Addr().(*net.TCPAddr).IP
		s.Close()
		if !ip.IsLoopback() {
			t.Errorf("MASTER_ADDR=%s: the store listens on %v", addr, ip)
		}
	}
	cfg := testConfig(0, 1, freeTCPPort(t), "far")
	cfg.MasterAddr, cfg.Secret = "192.0.2.1", "k" // TEST-NET-1: no host has it
	if _, err := Connect(ctx, cfg); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "not an address of this host") {
		t.Fatalf("Connect with a foreign MASTER_ADDR = %v", err)
	}
}

// TestUnresolvableMasterAddr: a MASTER_ADDR that DNS cannot resolve fails
// at once (not when the deadline ends) and says so.
func TestUnresolvableMasterAddr(t *testing.T) {
	checkLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	for _, connect := range []func(context.Context, Config) (*Store, error){Connect, Dial} {
		cfg := testConfig(0, 2, 29500, "dns")
		cfg.MasterAddr, cfg.Secret = "no-such-host.invalid", "k"
		_, err := connect(ctx, cfg)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "DNS") || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("error %v; want ErrConfig naming DNS", err)
		}
	}
}

// freeTCPPort returns a port nobody listened on a moment ago.
func freeTCPPort(t *testing.T) int {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().(*net.TCPAddr).Port
}
