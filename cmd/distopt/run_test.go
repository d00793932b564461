package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/distopt/distopt/collective/collectivetest"
	"github.com/distopt/distopt/collective/grpccomm"
	"github.com/distopt/distopt/collective/rendezvous"
)

// The tests run this test binary as the launcher (testMainEnv set: it runs
// main's dispatch) and as the program it launches (first argument "child":
// see child).
const testMainEnv = "DISTOPT_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(testMainEnv) == "1" {
		if len(os.Args) > 1 && os.Args[1] == "child" {
			os.Exit(child(os.Args[2:]))
		}
		os.Exit(dispatch(os.Args[1:], os.Stderr))
	}
	os.Exit(m.Run())
}

// child is a launched rank. Behaviours (args[0]):
//
//	env           print the job's variables, a line on stderr, a partial line
//	exit R C      rank R exits with status C once the others wait (C < 0:
//	              kills itself with signal -C); the others wait
//	stubborn R C  as exit, but the others ignore SIGTERM
//	wait          print "ready", exit 143 on SIGTERM or 130 on SIGINT
//	chatty        print "ready"; rank 0 then prints a line every 10 ms for
//	              a second, the others print nothing; all exit 0 after 1.5 s
//	collective    run the collectivetest suite over grpccomm
//	tree, sleeper, deaf: see treeChild
func child(args []string) int {
	rank, _ := strconv.Atoi(os.Getenv("RANK"))
	fmt.Printf("pid %d\n", os.Getpid())
	if code, ok := treeChild(args); ok {
		return code
	}
	switch args[0] {
	case "env":
		for _, k := range []string{"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "DISTOPT_RUN_ID", "DISTOPT_JOB_SECRET", "DISTOPT_GROUP_SIZE"} {
			fmt.Printf("%s=%s\n", k, os.Getenv(k))
		}
		fmt.Fprintln(os.Stderr, "to stderr")
		fmt.Print("no newline")
		return 0
	case "exit", "stubborn":
		r, _ := strconv.Atoi(args[1])
		code, _ := strconv.Atoi(args[2])
		if rank == r {
			awaitOthers()
			if code < 0 {
				_ = syscall.Kill(os.Getpid(), syscall.Signal(-code))
				time.Sleep(time.Minute)
			}
			return code
		}
		if args[0] == "stubborn" {
			signal.Ignore(syscall.SIGTERM)
		}
		fmt.Println("waiting")
		markReady()
		time.Sleep(time.Minute)
		return 0
	case "wait":
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
		fmt.Println("ready")
		select {
		case sig := <-sigs:
			fmt.Printf("got %v\n", sig)
			return 128 + int(sig.(syscall.Signal))
		case <-time.After(time.Minute):
			return 0
		}
	case "chatty":
		fmt.Println("ready")
		start := time.Now()
		for rank == 0 && time.Since(start) < time.Second {
			fmt.Println("tick")
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(time.Until(start.Add(1500 * time.Millisecond)))
		return 0
	case "collective":
		cfg, err := rendezvous.FromEnv()
		if err != nil {
			fmt.Println(err)
			return 3
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		store, err := rendezvous.Connect(ctx, cfg)
		if err != nil {
			fmt.Println(err)
			return 4
		}
		defer store.Close()
		c, err := grpccomm.New(ctx, store, grpccomm.Config{})
		if err != nil {
			fmt.Println(err)
			return 5
		}
		defer c.Close()
		if err := collectivetest.RunRank(ctx, c, 11, collectivetest.Options{LargeBytes: 128 << 10}); err != nil {
			fmt.Println(err)
			return 6
		}
		fmt.Println("suite passed")
		return 0
	}
	return 2
}

// readyDirEnv names a directory in which each waiting rank of the child
// modes exit and stubborn marks itself ready, so that the failing rank
// fails only once every other rank has started and set itself up.
const readyDirEnv = "DISTOPT_TEST_READY_DIR"

// markReady marks this rank ready in $DISTOPT_TEST_READY_DIR.
func markReady() {
	if dir := os.Getenv(readyDirEnv); dir != "" {
		_ = os.WriteFile(filepath.Join(dir, os.Getenv("RANK")), nil, 0o600)
	}
}

// awaitOthers waits (a minute at most) until the other ranks of this host
// are ready.
func awaitOthers() {
	dir := os.Getenv(readyDirEnv)
	n, _ := strconv.Atoi(os.Getenv("LOCAL_WORLD_SIZE"))
	for deadline := time.Now().Add(time.Minute); dir != "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if entries, _ := os.ReadDir(dir); len(entries) >= n-1 {
			return
		}
	}
}

// launched is a `distopt run` started by a test.
type launched struct {
	cmd            *exec.Cmd
	stdout, stderr *lineBuffer
	done           chan struct{}
}

// launch starts `distopt run ARGS -- <this binary> child CHILD...`.
func launch(t *testing.T, args []string, childArgs ...string) *launched {
	t.Helper()
	return launchProgram(t, args, append([]string{testBinary(t), "child"}, childArgs...)...)
}

// testBinary returns the path of this test binary; it skips t under -short.
func testBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("starts processes")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// launchProgram starts `distopt run ARGS -- PROGRAM...`.
func launchProgram(t *testing.T, args []string, program ...string) *launched {
	t.Helper()
	exe := testBinary(t)
	full := append(append(append([]string{"run"}, args...), "--"), program...)
	l := &launched{cmd: exec.Command(exe, full...), stdout: newLineBuffer(), stderr: newLineBuffer(), done: make(chan struct{})}
	l.cmd.Env = append(os.Environ(), testMainEnv+"=1", readyDirEnv+"="+t.TempDir())
	l.cmd.Stdout, l.cmd.Stderr = l.stdout, l.stderr
	if err := l.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = l.cmd.Wait()
		close(l.done)
	}()
	t.Cleanup(func() {
		select {
		case <-l.done:
		default:
			_ = l.cmd.Process.Kill()
			<-l.done
		}
	})
	return l
}

// wait waits for the launcher to exit and returns its status.
func (l *launched) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-l.done:
	case <-time.After(d):
		_ = l.cmd.Process.Kill()
		<-l.done
		t.Fatalf("distopt run did not exit within %v\nstdout:\n%s\nstderr:\n%s", d, l.stdout, l.stderr)
	}
	return l.cmd.ProcessState.ExitCode()
}

// pids returns the pids that the ranks printed.
func (l *launched) pids() []int {
	var pids []int
	for _, line := range l.stdout.lines() {
		var rank, pid int
		if n, _ := fmt.Sscanf(line, "[rank %d] pid %d", &rank, &pid); n == 2 {
			pids = append(pids, pid)
		}
	}
	return pids
}

// checkGone fails t if one of pids still exists.
func checkGone(t *testing.T, pids []int) {
	t.Helper()
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
			t.Errorf("rank process %d still exists (kill 0: %v)", pid, err)
		}
	}
}

func TestRunEnvironmentAndPrefixes(t *testing.T) {
	l := launch(t, []string{"--nproc-per-node", "3", "--group-size", "3"}, "env")
	if status := l.wait(t, 30*time.Second); status != 0 {
		t.Fatalf("status %d\nstderr:\n%s", status, l.stderr)
	}
	out := l.stdout.lines()
	var port, run, secret string
	for r := range 3 {
		p := fmt.Sprintf("[rank %d] ", r)
		want := []string{p + "RANK=" + strconv.Itoa(r), p + "WORLD_SIZE=3", p + "LOCAL_RANK=" + strconv.Itoa(r),
			p + "LOCAL_WORLD_SIZE=3", p + "MASTER_ADDR=127.0.0.1", p + "DISTOPT_GROUP_SIZE=3", p + "no newline"}
		for _, w := range want {
			if !slices.Contains(out, w) {
				t.Errorf("no line %q in stdout:\n%s", w, l.stdout)
			}
		}
		for _, line := range out {
			if v, ok := strings.CutPrefix(line, p+"MASTER_PORT="); ok {
				if port != "" && v != port {
					t.Errorf("ranks got ports %s and %s", port, v)
				}
				if n, err := strconv.Atoi(v); err != nil || n < 1 || n > 65535 {
					t.Errorf("MASTER_PORT=%q", v)
				}
				port = v
			}
			if v, ok := strings.CutPrefix(line, p+"DISTOPT_RUN_ID="); ok {
				if run != "" && v != run || v == "" {
					t.Errorf("ranks got run ids %q and %q", run, v)
				}
				run = v
			}
			if v, ok := strings.CutPrefix(line, p+"DISTOPT_JOB_SECRET="); ok {
				if secret != "" && v != secret || len(v) != 32 {
					t.Errorf("ranks got secrets %q and %q, want one of 32 hex digits", secret, v)
				}
				secret = v
			}
		}
		if !slices.Contains(l.stderr.lines(), p+"to stderr") {
			t.Errorf("no %q in stderr:\n%s", p+"to stderr", l.stderr)
		}
	}
	prefixed := regexp.MustCompile(`^\[rank [0-2]\] `)
	for _, line := range out {
		if !prefixed.MatchString(line) {
			t.Errorf("stdout line without a rank prefix: %q", line)
		}
	}
	checkGone(t, l.pids())
}

// TestRunMultiNodeEnvironment: with several hosts the launcher passes the
// secret it was given, and derives from it a run id that every host agrees
// on and that outsiders cannot guess (it changes with the secret). Without
// a secret it refuses to start.
func TestRunMultiNodeEnvironment(t *testing.T) {
	args := []string{"--nproc-per-node", "2", "--nnodes", "3", "--node-rank", "1", "--master-addr", "10.1.2.3", "--master-port", "4567"}
	runIDs := map[string]string{}
	t.Setenv("DISTOPT_GROUP_SIZE", "") // without --group-size the launcher sets none
	for _, secret := range []string{"s1", "s2", "s1"} {
		t.Setenv(rendezvous.EnvSecret, secret)
		l := launch(t, args, "env")
		if status := l.wait(t, 30*time.Second); status != 0 {
			t.Fatalf("status %d\nstderr:\n%s", status, l.stderr)
		}
		var run string
		for i, r := range []int{2, 3} {
			p := fmt.Sprintf("[node 1 rank %d] ", r) // several hosts: the prefix names the node
			for _, w := range []string{p + "WORLD_SIZE=6", p + "LOCAL_RANK=" + strconv.Itoa(i), p + "LOCAL_WORLD_SIZE=2",
				p + "MASTER_ADDR=10.1.2.3", p + "MASTER_PORT=4567", p + "DISTOPT_JOB_SECRET=" + secret, p + "DISTOPT_GROUP_SIZE="} {
				if !slices.Contains(l.stdout.lines(), w) {
					t.Errorf("no line %q in stdout:\n%s", w, l.stdout)
				}
			}
			for _, line := range l.stdout.lines() {
				if v, ok := strings.CutPrefix(line, p+"DISTOPT_RUN_ID="); ok {
					if strings.Contains(v, "10.1.2.3") || run != "" && v != run {
						t.Errorf("run id %q (rank 2: %q)", v, run)
					}
					run = v
				}
			}
		}
		if old, ok := runIDs[secret]; ok && old != run {
			t.Errorf("secret %s: run ids %q and %q", secret, old, run)
		}
		runIDs[secret] = run
	}
	if runIDs["s1"] == runIDs["s2"] {
		t.Errorf("run id %q does not depend on the secret", runIDs["s1"])
	}
	t.Setenv(rendezvous.EnvSecret, "")
	l := launch(t, args, "env")
	if status := l.wait(t, 30*time.Second); status != 2 || !strings.Contains(l.stderr.String(), "set DISTOPT_JOB_SECRET to the same secret on every host") {
		t.Fatalf("without a secret: status %d\nstderr:\n%s", status, l.stderr)
	}
}

// waitGone waits until none of pids exists (a zombie counts as gone: its
// parent may be a PID 1 that does not reap), at most d.
func waitGone(t *testing.T, pids []int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for _, pid := range pids {
		for syscall.Kill(pid, 0) != syscall.ESRCH && !zombie(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("process %d of a rank still runs %v later", pid, d)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// zombie reports whether process pid has exited but is not reaped.
func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	_, after, ok := bytes.Cut(b, []byte(") "))
	return ok && len(after) > 0 && after[0] == 'Z'
}

// waitReady waits until n ranks of l printed "ready".
func waitReady(t *testing.T, l *launched, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(l.stdout.String(), "] ready") < n {
		if time.Now().After(deadline) {
			t.Fatalf("ranks not ready:\n%s", l.stdout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRunLauncherKilled: SIGKILL of the launcher, which can forward
// nothing, still ends its ranks (they would otherwise wait a minute).
func TestRunLauncherKilled(t *testing.T) {
	l := launch(t, []string{"--nproc-per-node", "2"}, "wait")
	waitReady(t, l, 2)
	pids := l.pids()
	if len(pids) != 2 {
		t.Fatalf("pids %v", pids)
	}
	if err := l.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-l.done
	waitGone(t, pids, 20*time.Second)
}

// TestRunClosedStdout: `distopt run ... | head -1`. The launcher survives
// the end of its stdout, says so on stderr, lets the ranks finish (a silent
// rank as well as one that keeps printing) and exits with their status.
func TestRunClosedStdout(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "run", "--nproc-per-node", "2", "--", exe, "child", "chatty")
	cmd.Env = append(os.Environ(), testMainEnv+"=1")
	stderr := newLineBuffer()
	cmd.Stdout, cmd.Stderr = w, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var pids []int
	sc := bufio.NewScanner(r)
	for len(pids) < 2 && sc.Scan() {
		var rank, pid int
		if n, _ := fmt.Sscanf(sc.Text(), "[rank %d] pid %d", &rank, &pid); n == 2 {
			pids = append(pids, pid)
		}
	}
	r.Close() // as head does once it has its lines
	err = cmd.Wait()
	if len(pids) != 2 || err != nil || !strings.Contains(stderr.String(), "standard output failed") {
		t.Fatalf("pids %v, launcher: %v\nstderr:\n%s", pids, err, stderr)
	}
	checkGone(t, pids)
}

func TestRunFailureStopsOthers(t *testing.T) {
	tests := []struct {
		name   string
		child  []string
		status int
		log    string // in the launcher's stderr
		within time.Duration
	}{
		{"exit status", []string{"exit", "1", "3"}, 3, "rank 1 exited with status 3; stopping the other ranks", 10 * time.Second},
		{"killed by signal", []string{"exit", "2", "-9"}, 137, "rank 2 exited with status 137 (signal: killed)", 10 * time.Second},
		{"others ignore SIGTERM", []string{"stubborn", "0", "5"}, 5, "ranks still running 500ms after SIGTERM: killing them", 10 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			l := launch(t, []string{"--nproc-per-node", "3", "--grace", "500ms"}, tc.child...)
			status := l.wait(t, 30*time.Second)
			if status != tc.status {
				t.Errorf("status %d, want %d\nstderr:\n%s", status, tc.status, l.stderr)
			}
			if !strings.Contains(l.stderr.String(), tc.log) {
				t.Errorf("stderr lacks %q:\n%s", tc.log, l.stderr)
			}
			if took := time.Since(start); took > tc.within {
				t.Errorf("took %v (the others sleep a minute)", took)
			}
			if pids := l.pids(); len(pids) != 3 {
				t.Errorf("got pids %v of 3 ranks\n%s", pids, l.stdout)
			} else {
				checkGone(t, pids)
			}
		})
	}
}

func TestRunForwardsSignals(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			l := launch(t, []string{"--nproc-per-node", "2"}, "wait")
			waitReady(t, l, 2)
			if err := l.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			status := l.wait(t, 30*time.Second)
			if want := 128 + int(sig); status != want {
				t.Errorf("status %d, want %d\nstderr:\n%s", status, want, l.stderr)
			}
			for r := range 2 {
				if w := fmt.Sprintf("[rank %d] got %v", r, sig); !slices.Contains(l.stdout.lines(), w) {
					t.Errorf("no %q in stdout:\n%s", w, l.stdout)
				}
			}
			checkGone(t, l.pids())
		})
	}
}

func TestRunCollectiveSuite(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the collective suite in 3 processes")
	}
	l := launch(t, []string{"--nproc-per-node", "3"}, "collective")
	if status := l.wait(t, 90*time.Second); status != 0 {
		t.Fatalf("status %d\nstdout:\n%s\nstderr:\n%s", status, l.stdout, l.stderr)
	}
	for r := range 3 {
		if w := fmt.Sprintf("[rank %d] suite passed", r); !slices.Contains(l.stdout.lines(), w) {
			t.Errorf("no %q in stdout:\n%s", w, l.stdout)
		}
	}
}

func TestRunUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--", "true"}, "--nproc-per-node is required"},
		{[]string{"--nproc-per-node", "2"}, "no program to run"},
		{[]string{"--nproc-per-node", "2", "--nnodes", "2", "--", "true"}, "--master-addr and --master-port are required"},
		{[]string{"--nproc-per-node", "2", "--nnodes", "2", "--node-rank", "2", "--master-addr", "h", "--master-port", "1", "--", "true"}, "--node-rank=2 is not in [0, 2)"},
		{[]string{"--nproc-per-node", "3", "--nnodes", "2", "--node-rank", "1", "--master-addr", "h", "--master-port", "1", "--group-size", "4", "--", "true"}, "--group-size=4 does not divide the world size 6 (--nnodes 2 x --nproc-per-node 3)"},
		{[]string{"--nproc-per-node", "3", "--group-size", "-1", "--", "true"}, "--group-size=-1 does not divide"},
		// Found by FuzzRunArgs: configs allocated a configuration per rank
		// before checking the world size, and panicked.
		{[]string{"--nproc-per-node", "1000000000000", "--", "true"}, "--nnodes 1 x --nproc-per-node 1000000000000 exceeds 65536 ranks"},
		{[]string{"--nproc-per-node", "4096", "--nnodes", "17", "--node-rank", "0", "--master-addr", "h", "--master-port", "1", "--", "true"}, "exceeds 65536 ranks"},
		{[]string{"--nproc-per-node", "2", "--master-port", "65536", "--", "true"}, "--master-port=65536 is not a TCP port"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, err := parseRun(tc.args, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("parseRun: %v, want %q", err, tc.want)
			}
		})
	}
	var stderr bytes.Buffer
	if status := dispatch([]string{"nosuch"}, &stderr); status != 2 || !strings.Contains(stderr.String(), `unknown command "nosuch"`) || !strings.Contains(stderr.String(), "run ") {
		t.Errorf("dispatch(nosuch) = %d, %q", status, stderr.String())
	}
}

func TestRunProgramNotFound(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "run", "--nproc-per-node", "2", "--", "/nonexistent/program")
	cmd.Env = append(os.Environ(), testMainEnv+"=1")
	out, _ := cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() != 127 || !strings.Contains(string(out), "starting rank 0") {
		t.Errorf("status %d, output %q", cmd.ProcessState.ExitCode(), out)
	}
}

// lineBuffer collects output; safe for concurrent use.
type lineBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func newLineBuffer() *lineBuffer { return &lineBuffer{} }

func (b *lineBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lineBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *lineBuffer) lines() []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(b.String()))
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}
