package main

import (
	"os/exec"
	"slices"
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
