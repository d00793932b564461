package main

import (
	"bytes"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/distopt/distopt/optimizer"
)

// The banner of a launched rank names the gRPC transport and the
// rendezvous address; that of an in-process run says it is in-process.
// Both used to read "N ranks on cpu (1 goroutines)".
func TestBannerNamesTheCommunicator(t *testing.T) {
	cfg := optimizer.Config{LR: optimizer.Constant(1e-3)}
	teacher, init := initWeights(99), initWeights(1)

	var inproc bytes.Buffer
	if _, _, err := trainSharded(&inproc, 2, 1, 2, teacher, init, cfg); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	for k, v := range map[string]string{"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
		"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port} {
		t.Setenv(k, v)
	}
	var launched bytes.Buffer
	if _, _, _, err := processRank(&launched, 1, 2, teacher, init, cfg); err != nil {
		t.Fatal(err)
	}
	first := func(b *bytes.Buffer) string { line, _, _ := strings.Cut(b.String(), "\n"); return line }
	for _, tc := range []struct {
		banner string
		want   []string
	}{
		{first(&inproc), []string{"distopt: 2 ranks, ", "in-process communicator", "backend cpu"}},
		{first(&launched), []string{"distopt: 1 ranks, ", "gRPC communicator over TCP", "rendezvous at 127.0.0.1:" + port, "backend cpu"}},
	} {
		for _, w := range tc.want {
			if !strings.Contains(tc.banner, w) {
				t.Errorf("banner %q lacks %q", tc.banner, w)
			}
		}
	}
}
