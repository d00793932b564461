package main

import (
	"bufio"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// buildBinaries builds the launcher and this example into a temporary
// folder and returns the paths of distopt and train. It skips under -short.
func buildBinaries(t *testing.T) (distopt, train string) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the launcher and starts processes")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build the binaries")
	}
	bin := t.TempDir()
	build := exec.Command(goTool, "build", "-o", bin+string(filepath.Separator), "../../cmd/distopt", ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return filepath.Join(bin, "distopt"), filepath.Join(bin, "train")
}

// freeTCPPort returns a port of 127.0.0.1 that was free a moment ago.
func freeTCPPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// nodeCommand is the command of node k of a job of two hosts of one rank
// each, on this host: the launcher with --nnodes 2 and the job's secret.
func nodeCommand(distopt, port string, k int, program ...string) *exec.Cmd {
	args := append([]string{"run", "--nnodes", "2", "--node-rank", strconv.Itoa(k), "--nproc-per-node", "1",
		"--master-addr", "127.0.0.1", "--master-port", port, "--"}, program...)
	cmd := exec.Command(distopt, args...)
	cmd.Env = append(os.Environ(), "DISTOPT_JOB_SECRET=twonode-test-secret")
	return cmd
}

// digestLine matches the -state-digest line of a rank, whatever prefix the
// launcher put before it.
var digestLine = regexp.MustCompile(`state digest of rank \d+ of \d+: shard [0-9a-f]+ weights [0-9a-f]+`)

// digestsOf returns the sorted digest lines of out; it fails unless there
// are want of them.
func digestsOf(t *testing.T, what string, out []byte, want int) []string {
	t.Helper()
	d := digestLine.FindAllString(string(out), -1)
	if len(d) != want {
		t.Fatalf("%s: %d digest lines, want %d:\n%s", what, len(d), want, out)
	}
	slices.Sort(d)
	return d
}

// TestTwoNodesOnOneHost runs d = 2 three ways: two in-process ranks, two
// processes under one launcher, and two launchers of one rank each joined
// as two nodes (--nnodes 2 --node-rank 0/1, the same master address, port
// and DISTOPT_JOB_SECRET). Every rank's optimizer state (masters and
// moments, bit for bit) and the gathered weights must be the same in all
// three, and the two-node output must name node and rank.
func TestTwoNodesOnOneHost(t *testing.T) {
	distopt, train := buildBinaries(t)
	args := []string{train, "-steps", "12", "-recipe", "block", "-state-digest"}

	inproc, err := exec.Command(train, append(args[1:], "-ranks", "2")...).CombinedOutput()
	if err != nil {
		t.Fatalf("in-process run: %v\n%s", err, inproc)
	}
	want := digestsOf(t, "in-process", inproc, 2)

	one, err := exec.Command(distopt, append([]string{"run", "--nproc-per-node", "2", "--"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("one launcher: %v\n%s", err, one)
	}
	if got := digestsOf(t, "one launcher", one, 2); !slices.Equal(got, want) {
		t.Errorf("one launcher:\n%q\nin-process:\n%q", got, want)
	}

	port := freeTCPPort(t)
	nodes := [2]*exec.Cmd{nodeCommand(distopt, port, 0, args...), nodeCommand(distopt, port, 1, args...)}
	outs := [2][]byte{}
	errs := make(chan error, 2)
	for k, c := range nodes {
		go func() {
			var err error
			outs[k], err = c.CombinedOutput()
			errs <- err
		}()
	}
	for range nodes {
		if err := <-errs; err != nil {
			t.Errorf("a node failed: %v", err)
		}
	}
	if t.Failed() {
		t.Fatalf("node 0:\n%s\nnode 1:\n%s", outs[0], outs[1])
	}
	both := append(append([]byte{}, outs[0]...), outs[1]...)
	if got := digestsOf(t, "two nodes", both, 2); !slices.Equal(got, want) {
		t.Errorf("two nodes:\n%q\nin-process:\n%q", got, want)
	}
	for k, out := range outs {
		if p := "[node " + strconv.Itoa(k) + " rank " + strconv.Itoa(k) + "] state digest"; !strings.Contains(string(out), p) {
			t.Errorf("node %d's output lacks %q:\n%s", k, p, out)
		}
	}
}

// TestKilledNode kills node 1 (its launcher, with SIGKILL: its rank dies
// with it) in the middle of a two-node run. Node 0's rank must fail within
// its step deadline with an error that names rank 1 and node 1, and node
// 0's launcher must say which of its ranks exited.
func TestKilledNode(t *testing.T) {
	distopt, train := buildBinaries(t)
	const stepTimeout = 20 * time.Second
	args := []string{train, "-steps", "100000", "-step-delay", "20ms", "-step-timeout", stepTimeout.String()}
	port := freeTCPPort(t)
	node0, node1 := nodeCommand(distopt, port, 0, args...), nodeCommand(distopt, port, 1, args...)
	out, took, err := killSecondNode(t, node0, node1)
	if err == nil {
		t.Fatalf("node 0 succeeded after node 1 was killed:\n%s", out)
	}
	for _, w := range []string{
		"(rank 1 ran on node 1)", // the rank's error names the lost node
		"distopt run: node 0 rank 0 exited with status 1; stopping the other ranks", // the launcher names its own
	} {
		if !strings.Contains(out, w) {
			t.Errorf("node 0's output lacks %q", w)
		}
	}
	if t.Failed() {
		t.Logf("node 0's output:\n%s", out)
	}
	t.Logf("node 0 failed %v after node 1 was killed (step deadline %v)", took.Round(time.Millisecond), stepTimeout)
}

// killSecondNode starts both nodes, waits until node 0's rank 0 trains (it
// prints its steps), kills node 1's launcher and returns node 0's output
// (stdout and stderr), how long node 0 took to exit after the kill, and
// its exit error.
func killSecondNode(t *testing.T, node0, node1 *exec.Cmd) (string, time.Duration, error) {
	t.Helper()
	stdout, err := node0.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	node0.Stderr = &stderr
	if err := node0.Start(); err != nil {
		t.Fatal(err)
	}
	if err := node1.Start(); err != nil {
		t.Fatal(err)
	}
	defer node1.Process.Kill()
	defer node0.Process.Kill()
	sc := bufio.NewScanner(stdout)
	var seen []string
	for sc.Scan() {
		seen = append(seen, sc.Text())
		if strings.HasPrefix(sc.Text(), "[node 0 rank 0] step ") {
			break
		}
	}
	if err := node1.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = node1.Wait()
	killed := time.Now()
	rest, _ := io.ReadAll(stdout)
	err = node0.Wait()
	return strings.Join(seen, "\n") + "\n" + string(rest) + stderr.String(), time.Since(killed), err
}

// weightsOf returns the weights digests of digest lines.
func weightsOf(lines []string) []string {
	var w []string
	for _, l := range lines {
		_, v, _ := strings.Cut(l, " weights ")
		w = append(w, v)
	}
	return w
}

// TestTwoNodesHierarchical runs two groups of one rank (-group-size 1:
// state replicated, gradients all-reduced across the groups) in-process and
// as two nodes: the same state digests on both ranks and both runs, and
// the same gathered weights as flat sharding (with two ranks the
// reduction is one addition and a halving in either scheme).
func TestTwoNodesHierarchical(t *testing.T) {
	distopt, train := buildBinaries(t)
	args := []string{train, "-steps", "12", "-recipe", "tile", "-state-digest"}
	flat, err := exec.Command(train, append(args[1:], "-ranks", "2")...).CombinedOutput()
	if err != nil {
		t.Fatalf("flat in-process run: %v\n%s", err, flat)
	}
	inproc, err := exec.Command(train, append(args[1:], "-ranks", "2", "-group-size", "1")...).CombinedOutput()
	if err != nil {
		t.Fatalf("hierarchical in-process run: %v\n%s", err, inproc)
	}
	want := digestsOf(t, "hierarchical in-process", inproc, 2)
	if want[0] != want[1] || !strings.Contains(want[0], "rank 0 of 1") {
		t.Errorf("the two groups' replicas differ: %q", want)
	}
	if w, f := weightsOf(want), weightsOf(digestsOf(t, "flat", flat, 2)); !slices.Equal(w, f) {
		t.Errorf("gathered weights %q, flat %q", w, f)
	}
	port := freeTCPPort(t)
	hargs := append(args, "-group-size", "1")
	nodes := [2]*exec.Cmd{nodeCommand(distopt, port, 0, hargs...), nodeCommand(distopt, port, 1, hargs...)}
	var outs [2][]byte
	errs := make(chan error, 2)
	for k, c := range nodes {
		go func() {
			var err error
			outs[k], err = c.CombinedOutput()
			errs <- err
		}()
	}
	for range nodes {
		if err := <-errs; err != nil {
			t.Errorf("a node failed: %v", err)
		}
	}
	both := append(append([]byte{}, outs[0]...), outs[1]...)
	if t.Failed() {
		t.Fatalf("%s", both)
	}
	if got := digestsOf(t, "two nodes", both, 2); !slices.Equal(got, want) {
		t.Errorf("two nodes:\n%q\nin-process:\n%q", got, want)
	}
}
