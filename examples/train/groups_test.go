package main

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestGroupsUnderLauncher runs 2 groups x 2 ranks (4 ranks) as one process
// per rank, the group size given to the launcher (`distopt run --group-size
// 2`: the ranks read DISTOPT_GROUP_SIZE and make gRPC sub-communicators),
// and in-process with -group-size 2: the same state digests, rank for rank.
// Both reduce in the same order (within the group in rank order, then
// across the groups), so this holds for any gradients, not only exactly
// summable ones.
func TestGroupsUnderLauncher(t *testing.T) {
	distopt, train := buildBinaries(t)
	args := []string{"-steps", "6", "-recipe", "block", "-state-digest"}
	inproc, err := exec.Command(train, append(args, "-ranks", "4", "-group-size", "2")...).CombinedOutput()
	if err != nil {
		t.Fatalf("in-process run: %v\n%s", err, inproc)
	}
	want := digestsOf(t, "in-process", inproc, 4)
	run := append([]string{"run", "--nproc-per-node", "4", "--group-size", "2", "--", train}, args...)
	out, err := exec.Command(distopt, run...).CombinedOutput()
	if err != nil {
		t.Fatalf("distopt run: %v\n%s", err, out)
	}
	if got := digestsOf(t, "launcher", out, 4); !slices.Equal(got, want) {
		t.Errorf("launcher:\n%q\nin-process:\n%q", got, want)
	}
}

// TestKilledNodeGroups kills node 1 of two nodes of two ranks, each node a
// group (--group-size 2): ranks 2 and 3 die with their launcher. Node 0's
// ranks reach them only across the groups, through sub-communicators
// whose ranks are not the job's; the errors must still name the job's rank
// and its node, and node 0's launcher must stop.
func TestKilledNodeGroups(t *testing.T) {
	distopt, train := buildBinaries(t)
	port := freeTCPPort(t)
	node := func(k int) *exec.Cmd {
		cmd := exec.Command(distopt, "run", "--nnodes", "2", "--node-rank", strconv.Itoa(k), "--nproc-per-node", "2",
			"--group-size", "2", "--master-addr", "127.0.0.1", "--master-port", port, "--",
			train, "-steps", "100000", "-step-delay", "20ms", "-step-timeout", "60s")
		cmd.Env = append(os.Environ(), "DISTOPT_JOB_SECRET=groups-test-secret")
		return cmd
	}
	node0, node1 := node(0), node(1)
	out, _, err := killSecondNode(t, node0, node1)
	if err == nil {
		t.Fatalf("node 0 succeeded after node 1 was killed:\n%s", out)
	}
	if !strings.Contains(out, "hierarchical: 2 groups of 2 ranks") {
		t.Errorf("node 0's output does not say it ran in groups:\n%s", out)
	}
	// Rank 0 talks across the groups to rank 2, rank 1 to rank 3; the
	// first to fail is named.
	if !strings.Contains(out, "(rank 2 ran on node 1)") && !strings.Contains(out, "(rank 3 ran on node 1)") {
		t.Errorf("node 0's output names no rank of node 1:\n%s", out)
	}
}

// TestOverlapDigest checks -state-digest with -overlap, whose last step
// leaves its all-gathers in flight: the overlapped pipeline ends with the
// state digests of the synchronous step, rank for rank.
func TestOverlapDigest(t *testing.T) {
	_, train := buildBinaries(t)
	args := []string{"-steps", "8", "-recipe", "tile", "-state-digest"}
	sync, err := exec.Command(train, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("synchronous run: %v\n%s", err, sync)
	}
	overlap, err := exec.Command(train, append(args, "-overlap")...).CombinedOutput()
	if err != nil {
		t.Fatalf("-overlap run: %v\n%s", err, overlap)
	}
	if got, want := digestsOf(t, "-overlap", overlap, 4), digestsOf(t, "synchronous", sync, 4); !slices.Equal(got, want) {
		t.Errorf("-overlap:\n%q\nsynchronous:\n%q", got, want)
	}
}
