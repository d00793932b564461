package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// torchrun's spellings of the flags set what distopt's do.
func TestRunTorchrunFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want runOptions // only the compared fields
	}{
		{[]string{"--nproc_per_node", "2", "--standalone"}, runOptions{nproc: 2, nnodes: 1, standalone: true}},
		{[]string{"--nproc_per_node=3", "--nnodes=2:2", "--node_rank=1", "--master_addr=h", "--master_port=9"}, runOptions{nproc: 3, nnodes: 2, nodeRank: 1, masterAddr: "h", masterPort: 9}},
		{[]string{"--nproc-per-node", "1", "--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", "h:1234", "--rdzv_backend", "c10d", "--rdzv_id", "x"}, runOptions{nproc: 1, nnodes: 2, masterAddr: "h", masterPort: 1234, runID: "x"}},
		{[]string{"--nproc_per_node", "1", "--nnodes", "2", "--rdzv_endpoint", "h"}, runOptions{nproc: 1, nnodes: 2, masterAddr: "h", masterPort: 29400}},
		{[]string{"--nproc_per_node", "1", "--rdzv_endpoint", "[::1]:5"}, runOptions{nproc: 1, nnodes: 1, masterAddr: "::1", masterPort: 5}},
		{[]string{"--nproc_per_node", "cpu"}, runOptions{nproc: runtime.NumCPU(), nnodes: 1}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			o, err := parseRun(append(tc.args, "--", "prog"), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			got := runOptions{nproc: o.nproc, nnodes: o.nnodes, nodeRank: o.nodeRank, masterAddr: o.masterAddr, masterPort: o.masterPort, runID: o.runID, standalone: o.standalone}
			if !(got.nproc == tc.want.nproc && got.nnodes == tc.want.nnodes && got.nodeRank == tc.want.nodeRank && got.masterAddr == tc.want.masterAddr &&
				got.masterPort == tc.want.masterPort && got.runID == tc.want.runID && got.standalone == tc.want.standalone) {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestRunTorchrunFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--nproc_per_node", "2", "--nnodes", "1:4"}, "elastic range"},
		{[]string{"--nproc_per_node", "2", "--standalone", "--nnodes", "2"}, "--standalone is one host"},
		{[]string{"--nproc_per_node", "2", "--standalone", "--master_port", "5"}, "--standalone picks its own"},
		{[]string{"--nproc_per_node", "2", "--rdzv_endpoint", "h:1", "--master_addr", "h"}, "either --rdzv-endpoint"},
		{[]string{"--nproc_per_node", "2", "--rdzv_endpoint", "h:x"}, "is not a TCP port"},
		{[]string{"--nproc_per_node", "2", "--rdzv_backend", "etcd"}, "want c10d or static"},
		{[]string{"--nproc_per_node", "two"}, "want a number, gpu, cpu or auto"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, err := parseRun(append(tc.args, "--", "prog"), io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("parseRun: %v, want %q", err, tc.want)
			}
		})
	}
	// gpu counts the GPUs; without any it is an error, auto takes the CPUs.
	for _, tc := range []struct {
		spec  string
		count int
		err   error
		want  int
	}{
		{"gpu", 8, nil, 8}, {"auto", 8, nil, 8}, {"auto", 0, errors.New("no driver"), runtime.NumCPU()}, {"gpu", 0, errors.New("no driver"), -1}, {"gpu", 0, nil, -1},
	} {
		v := nprocValue{gpus: func() (int, error) { return tc.count, tc.err }}
		if err := v.Set(tc.spec); (err != nil) != (tc.want < 0) || tc.want >= 0 && v.n != tc.want {
			t.Errorf("%s with %d GPUs (%v): n=%d, %v; want %d", tc.spec, tc.count, tc.err, v.n, err, tc.want)
		}
	}
}

// Help is asked for, so it exits 0; its flags read as the usage line
// spells them (--flag).
func TestHelpAndVersion(t *testing.T) {
	var out, errb bytes.Buffer
	defer func(w io.Writer) { stdout = w }(stdout)
	stdout = &out
	for _, args := range [][]string{{"help"}, {"--help"}, {"-h"}} {
		out.Reset()
		if status := dispatch(args, &errb); status != 0 || !strings.Contains(out.String(), "usage: distopt COMMAND") || !strings.Contains(out.String(), "version") {
			t.Errorf("%v: status %d, stdout %q", args, status, out.String())
		}
	}
	out.Reset()
	if _, err := parseRun([]string{"--help"}, &errb); !errors.Is(err, flag.ErrHelp) || !strings.HasPrefix(out.String(), runUsage) {
		t.Errorf("run --help: %v, %q", err, out.String())
	}
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "-") && !strings.HasPrefix(strings.TrimSpace(line), "--") {
			t.Errorf("help line with a single dash: %q", line)
		}
	}
	for _, want := range []string{"--nproc-per-node N  (or --nproc_per_node)", "--standalone", "--rdzv-endpoint HOST[:PORT]"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("run help lacks %q:\n%s", want, out.String())
		}
	}

	out.Reset()
	if status := dispatch([]string{"--version"}, &errb); status != 0 || !strings.HasPrefix(out.String(), "distopt ") {
		t.Errorf("--version: status %d, %q", status, out.String())
	}
	info := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v0.3.0"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}, {Key: "vcs.time", Value: "2026-12-01T03:00:00Z"}}}
	out.Reset()
	printVersion(&out, info)
	if want := "distopt v0.3.0 (commit 0123456789ab, modified, 2026-12-01T03:00:00Z) go1.26.0\n"; out.String() != want {
		t.Errorf("printVersion = %q, want %q", out.String(), want)
	}
}

// runEnv runs `distopt run ARGS -- env` (this test binary as distopt) with
// the extra environment and returns each rank's variables and stderr.
func runEnv(t *testing.T, extra []string, args ...string) (map[int]map[string]string, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts processes")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	envProg, err := exec.LookPath("env")
	if err != nil {
		t.Skip("no env program")
	}
	cmd := exec.Command(exe, append(append([]string{"run"}, args...), "--", envProg)...)
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "OMP_NUM_THREADS=") }), append(extra, testMainEnv+"=1")...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = 30 * time.Second
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\nstderr:\n%s", err, errb.String())
	}
	ranks := map[int]map[string]string{}
	for _, line := range strings.Split(out.String(), "\n") {
		var r int
		if n, _ := fmtSscanRank(line, &r); n == 1 {
			kv := line[strings.Index(line, "] ")+2:]
			k, v, _ := strings.Cut(kv, "=")
			if ranks[r] == nil {
				ranks[r] = map[string]string{}
			}
			ranks[r][k] = v
		}
	}
	return ranks, errb.String()
}

// The README's torchrun-style line: torchrun's spellings, its variables,
// OMP_NUM_THREADS=1 with torchrun's notice unless it is set.
func TestRunTorchrunEnvironment(t *testing.T) {
	ranks, stderr := runEnv(t, nil, "--nproc_per_node", "2", "--standalone")
	if len(ranks) != 2 {
		t.Fatalf("ranks %v", ranks)
	}
	for r, env := range ranks {
		for k, v := range map[string]string{"RANK": strconv.Itoa(r), "WORLD_SIZE": "2", "LOCAL_RANK": strconv.Itoa(r), "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1",
			"ROLE_RANK": strconv.Itoa(r), "ROLE_WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": env["DISTOPT_RUN_ID"], "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1"} {
			if env[k] != v || v == "" {
				t.Errorf("rank %d: %s=%q, want %q", r, k, env[k], v)
			}
		}
	}
	if !strings.Contains(stderr, "Setting OMP_NUM_THREADS environment variable for each process to be 1") {
		t.Errorf("no OMP_NUM_THREADS notice in stderr:\n%s", stderr)
	}

	ranks, stderr = runEnv(t, []string{"OMP_NUM_THREADS=3", "DISTOPT_JOB_SECRET=s"}, "--nproc_per_node=2", "--nnodes=3", "--node_rank=2", "--rdzv_endpoint=10.1.2.3:4567")
	for i, r := range []int{4, 5} {
		env := ranks[r]
		for k, v := range map[string]string{"LOCAL_RANK": strconv.Itoa(i), "GROUP_RANK": "2", "GROUP_WORLD_SIZE": "3", "ROLE_WORLD_SIZE": "6",
			"OMP_NUM_THREADS": "3", "MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "4567"} {
			if env[k] != v {
				t.Errorf("rank %d: %s=%q, want %q", r, k, env[k], v)
			}
		}
	}
	if strings.Contains(stderr, "OMP_NUM_THREADS") {
		t.Errorf("notice although OMP_NUM_THREADS was set:\n%s", stderr)
	}
}

// fmtSscanRank reads the rank of a "[rank R] ..." line, or of a
// "[node K rank R] ..." line of a job of several hosts.
func fmtSscanRank(line string, r *int) (int, error) {
	rest, ok := strings.CutPrefix(line, "[rank ")
	if !ok {
		if rest, ok = strings.CutPrefix(line, "[node "); !ok {
			return 0, nil
		}
		if _, rest, ok = strings.Cut(rest, " rank "); !ok {
			return 0, nil
		}
	}
	num, _, ok := strings.Cut(rest, "]")
	if !ok {
		return 0, nil
	}
	n, err := strconv.Atoi(num)
	if err != nil {
		return 0, err
	}
	*r = n
	return 1, nil
}
