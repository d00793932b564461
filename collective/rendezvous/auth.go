package rendezvous

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// EnvSecret names the environment variable that carries the job's secret
// (see Config.Secret). `distopt run` creates a random one for each job on
// one host; jobs on several hosts need the same value set on every host.
const EnvSecret = "DISTOPT_JOB_SECRET"

// tokenHeader is the gRPC metadata key of the token of every call.
const tokenHeader = "distopt-job-token"

// token derives the credential sent on the wire from secret, so that the
// secret itself never leaves the process: the hex SHA-256 of a label and
// the secret.
func token(secret string) string {
	sum := sha256.Sum256([]byte("distopt job token v1\x00" + secret))
	return hex.EncodeToString(sum[:])
}

// errUnauthenticated is what a caller without the job's token gets: it says
// nothing about the job.
var errUnauthenticated = status.Error(codes.Unauthenticated, "unauthenticated")

// AuthServerOption returns the server option that makes a gRPC server
// refuse every call that does not carry the token of secret (see
// AuthDialOption), before its request is read. The refusal is the status
// Unauthenticated with the message "unauthenticated" and nothing else. With
// an empty secret every call is accepted. The store uses it, and so do the
// peer endpoints of collective/grpccomm.
func AuthServerOption(secret string) grpc.ServerOption {
	check := authenticator(secret)
	if check == nil {
		return grpc.EmptyServerOption{}
	}
	return grpc.InTapHandle(func(ctx context.Context, info *tap.Info) (context.Context, error) {
		return ctx, check(info)
	})
}

// authenticator returns the check of a call's token for secret: nil (no
// check) when secret is empty.
func authenticator(secret string) func(*tap.Info) error {
	if secret == "" {
		return nil
	}
	want := []byte(token(secret))
	return func(info *tap.Info) error {
		got := info.Header.Get(tokenHeader)
		if len(got) != 1 || subtle.ConstantTimeCompare([]byte(got[0]), want) != 1 {
			return errUnauthenticated
		}
		return nil
	}
}

// AuthDialOption returns the dial option that adds the token of secret to
// every call of a connection; nothing when secret is empty.
func AuthDialOption(secret string) grpc.DialOption {
	if secret == "" {
		return grpc.EmptyDialOption{}
	}
	return grpc.WithPerRPCCredentials(tokenCreds(token(secret)))
}

// tokenCreds sends a token with every call.
type tokenCreds string

func (t tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{tokenHeader: string(t)}, nil
}

// RequireTransportSecurity is false: the token is meant for plain TCP
// inside the job's network (see the package documentation).
func (tokenCreds) RequireTransportSecurity() bool { return false }
