//go:build unix

package rendezvous

import (
	"syscall"
	"testing"
)

// closedPort returns a port of 127.0.0.1 that refuses connections for the
// whole test: a socket bound there and never listening, so that no other
// test or process can take the port meanwhile (a port closed after
// net.Listen can be, and then answers).
func closedPort(t *testing.T) int {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return sa.(*syscall.SockaddrInet4).Port
}
