package rendezvous_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/distopt/distopt/collective/rendezvous"
)

// A gRPC server of the job's own (here the standard health service) behind
// Guard: calls without the job's token are refused, idle connections are
// bounded, and the job's clients pass with AuthDialOption.
func ExampleGuard() {
	const secret = "the job's secret"
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	guarded, auth := rendezvous.Guard(lis, secret)
	srv := grpc.NewServer(auth)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(guarded) }()
	defer srv.Stop()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name string
		opt  grpc.DialOption
	}{{"outsider", grpc.EmptyDialOption{}}, {"rank", rendezvous.AuthDialOption(secret)}} {
		cc, err := grpc.NewClient("passthrough:///"+lis.Addr().String(),
			grpc.WithTransportCredentials(insecure.NewCredentials()), tc.opt)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			fmt.Printf("%s: %v\n", tc.name, status.Code(err))
		} else {
			fmt.Printf("%s: %v\n", tc.name, resp.Status)
		}
		cc.Close()
	}
	// Output:
	// outsider: Unauthenticated
	// rank: SERVING
}
