package main

import (
	"net"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// TestUnderLauncher builds the example and distopt's launcher, runs two
// ranks as processes over gRPC, and checks that rank 0 reports a held-out
// loss within 2% of GoMLX's Adam.
func TestUnderLauncher(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two binaries and starts processes")
	}
	dir := t.TempDir()
	// The launcher is built in the core module (its own go.sum), the
	// example in this one.
	for _, b := range []*exec.Cmd{
		exec.Command("go", "build", "-o", dir, "."),
		exec.Command("go", "build", "-o", dir, "./cmd/distopt"),
	} {
		if b.Args[len(b.Args)-1] != "." {
			b.Dir = filepath.Join("..", "..", "..")
		}
		if out, err := b.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(lis.Addr().(*net.TCPAddr).Port)
	lis.Close()
	run := exec.Command(filepath.Join(dir, "distopt"), "run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", port,
		"--", filepath.Join(dir, "example"), "-steps", "60")
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("distopt run: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`\[rank 0\] held-out loss after 60 steps: distopt ([0-9.]+)\s+GoMLX Adam ([0-9.]+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no held-out loss from rank 0 in:\n%s", out)
	}
	got, _ := strconv.ParseFloat(string(m[1]), 64)
	want, _ := strconv.ParseFloat(string(m[2]), 64)
	t.Logf("2 processes over gRPC: held-out loss %.5f, GoMLX Adam %.5f", got, want)
	if got > 1.02*want || got < 0.98*want {
		t.Errorf("held-out loss %.5f is not within 2%% of GoMLX Adam's %.5f\n%s", got, want, out)
	}
}
