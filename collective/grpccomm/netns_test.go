package grpccomm_test

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/distopt/distopt/collective/rendezvous"
)

// netnsPair is two network namespaces joined by a veth pair, as two hosts
// on one link: addrs[i] is the address of namespace names[i].
type netnsPair struct {
	names, devs, addrs [2]string
}

// newNetnsPair creates the namespaces, or skips t where that cannot be done
// (not root, no ip command, no namespace support). They are deleted at the
// end of t. Addresses are in 10.0.0.0/8 and exist only inside the
// namespaces.
func newNetnsPair(t *testing.T) *netnsPair {
	t.Helper()
	if testing.Short() {
		t.Skip("creates network namespaces")
	}
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("no ip command (iproute2)")
	}
	id := os.Getpid() % 10000
	subnet := fmt.Sprintf("10.%d.%d", 200+id%50, id/50%250)
	n := &netnsPair{
		names: [2]string{fmt.Sprintf("distopt-a%d", id), fmt.Sprintf("distopt-b%d", id)},
		devs:  [2]string{fmt.Sprintf("dopta%d", id), fmt.Sprintf("doptb%d", id)},
		addrs: [2]string{subnet + ".1", subnet + ".2"},
	}
	if err := ipCmd("netns", "add", n.names[0]); err != nil {
		t.Skipf("cannot create a network namespace: %v", err)
	}
	t.Cleanup(func() { _ = ipCmd("netns", "del", n.names[0]) })
	if err := ipCmd("netns", "add", n.names[1]); err != nil {
		t.Skipf("cannot create a network namespace: %v", err)
	}
	t.Cleanup(func() { _ = ipCmd("netns", "del", n.names[1]) })
	steps := [][]string{
		{"link", "add", n.devs[0], "netns", n.names[0], "type", "veth", "peer", "name", n.devs[1], "netns", n.names[1]},
	}
	for i := range 2 {
		steps = append(steps,
			[]string{"-n", n.names[i], "addr", "add", n.addrs[i] + "/24", "dev", n.devs[i]},
			[]string{"-n", n.names[i], "link", "set", n.devs[i], "up"},
			[]string{"-n", n.names[i], "link", "set", "lo", "up"})
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			t.Skipf("cannot set up the veth link: %v", err)
		}
	}
	return n
}

// ipCmd runs the ip command.
func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// spawnIn starts rank r of 2 in namespace i, the master being namespace 0.
func (n *netnsPair) spawnIn(t *testing.T, r int, port int, extra ...string) *proc {
	cfg := rendezvous.Config{Rank: r, WorldSize: 2, LocalRank: 0, LocalWorldSize: 1, MasterAddr: n.addrs[0], MasterPort: port, RunID: t.Name(), Secret: "netns"}
	return spawn(t, r, append(cfg.Environ(), extra...), "ip", "netns", "exec", n.names[r])
}

// TestNetworkNamespaces runs two ranks in two network namespaces, as two
// hosts: first steps that must agree, then steps during which the link goes
// down, which both ranks must notice through keepalives (no connection is
// reset: packets just vanish) and report naming the other rank.
func TestNetworkNamespaces(t *testing.T) {
	n := newNetnsPair(t)
	t.Run("steps", func(t *testing.T) {
		procs := [2]*proc{n.spawnIn(t, 0, 29500, roleEnv+"=steps", "GRPCCOMM_TEST_STEPS=5"), n.spawnIn(t, 1, 29500, roleEnv+"=steps", "GRPCCOMM_TEST_STEPS=5")}
		var sums [2]uint64
		for i, p := range procs {
			res := p.wait(t, 60*time.Second)
			if res.Stage != "done" || res.Steps != 5 {
				t.Fatalf("rank %d: stage %s after %d steps: %s\n%s", i, res.Stage, res.Steps, res.Err, p.out())
			}
			sums[i] = res.Checksum
		}
		if sums[0] != sums[1] {
			t.Errorf("ranks gathered different bytes: checksums %x and %x", sums[0], sums[1])
		}
	})
	t.Run("link down", func(t *testing.T) {
		procs := [2]*proc{n.spawnIn(t, 0, 29501, roleEnv+"=steps"), n.spawnIn(t, 1, 29501, roleEnv+"=steps")}
		for _, p := range procs {
			p.waitLine(t, "step 2", 60*time.Second)
		}
		if err := ipCmd("-n", n.names[1], "link", "set", n.devs[1], "down"); err != nil {
			t.Fatal(err)
		}
		down := time.Now()
		defer func() { _ = ipCmd("-n", n.names[1], "link", "set", n.devs[1], "up") }()
		for i, p := range procs {
			// Keepalive: 1 s idle, then 2 s for the answer. (Rank 0's
			// store then waits up to 5 s for rank 1 before it exits.)
			res := p.wait(t, 30*time.Second)
			took := res.failedAt().Sub(down)
			t.Logf("rank %d failed after %v: %s", i, took.Round(time.Millisecond), res.Err)
			if res.Stage != "run" || res.Blamed != 1-i || !res.PeerLost {
				t.Errorf("rank %d: stage %s, blamed %d, peer lost %v: %s", i, res.Stage, res.Blamed, res.PeerLost, res.Err)
			}
			if took > 8*time.Second {
				t.Errorf("rank %d took %v to notice the link down", i, took)
			}
		}
	})
}
