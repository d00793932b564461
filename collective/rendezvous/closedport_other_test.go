//go:build !unix

package rendezvous

import (
	"net"
	"testing"
)

// closedPort returns a port of 127.0.0.1 that nobody listened on a moment
// ago.
func closedPort(t *testing.T) int {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().(*net.TCPAddr).Port
}
