package grpccomm_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/collectivetest"
	"github.com/distopt/distopt/collective/grpccomm"
	"github.com/distopt/distopt/collective/rendezvous"
)

// The multi-process tests start this test binary again, once per rank,
// with the environment of `distopt run` plus roleEnv naming what the rank
// does (see runRole). Each rank prints one result line (resultPrefix and
// the JSON of a rankResult) and exits 0 if it did what the role expects.
const (
	roleEnv      = "GRPCCOMM_TEST_ROLE"
	timeoutEnv   = "GRPCCOMM_TEST_TIMEOUT" // bound of the whole role, a time.Duration
	resultPrefix = "RESULT "
)

func TestMain(m *testing.M) {
	if role := os.Getenv(roleEnv); role != "" {
		os.Exit(runRole(role))
	}
	os.Exit(m.Run())
}

// rankResult is what a rank process reports.
type rankResult struct {
	Rank     int    `json:"rank"`
	Stage    string `json:"stage"` // where it stopped: config, connect, new, run, close, done
	Err      string `json:"err,omitempty"`
	Steps    int    `json:"steps"`               // steps completed (role "steps")
	Blamed   int    `json:"blamed"`              // rank named by a *collective.RankError, else -1
	PeerLost bool   `json:"peer_lost"`           // the error matches collective.ErrPeerLost
	Deadline bool   `json:"deadline"`            // the error matches context.DeadlineExceeded
	Member   bool   `json:"membership"`          // the error matches rendezvous.ErrMembership
	PortUsed bool   `json:"port_in_use"`         // the error matches rendezvous.ErrPortInUse
	Leaked   string `json:"leaked,omitempty"`    // goroutines left after Close
	Checksum uint64 `json:"checksum,omitempty"`  // of the last step's result (role "steps")
	FailedAt int64  `json:"failed_at,omitempty"` // when the steps failed, Unix milliseconds
}

// failedAt returns when the steps of res failed.
func (res rankResult) failedAt() time.Time { return time.UnixMilli(res.FailedAt) }

// runRole is the main of a rank process. Roles:
//
//	conformance: collectivetest.RunRank, then RunRankAbort and RunRankClose
//	             on new communicators;
//	steps:       all-reduce and all-gather steps until GRPCCOMM_TEST_STEPS
//	             (0: until an error), printing "step k" after each.
func runRole(role string) int {
	before := runtime.NumGoroutine()
	res := rankResult{Rank: -1, Blamed: -1}
	report := func(stage string, err error) int {
		res.Stage = stage
		if err != nil {
			res.Err = err.Error()
			var re *collective.RankError
			if errors.As(err, &re) {
				res.Blamed = re.Rank
			}
			res.PeerLost = errors.Is(err, collective.ErrPeerLost)
			res.Deadline = errors.Is(err, context.DeadlineExceeded)
			res.Member = errors.Is(err, rendezvous.ErrMembership)
			res.PortUsed = errors.Is(err, rendezvous.ErrPortInUse)
		}
		b, _ := json.Marshal(res)
		fmt.Printf("%s%s\n", resultPrefix, b)
		if err != nil {
			return 1
		}
		return 0
	}
	cfg, err := rendezvous.FromEnv()
	if err != nil {
		return report("config", err)
	}
	res.Rank = cfg.Rank
	cfg.CloseTimeout = 5 * time.Second
	timeout, _ := time.ParseDuration(os.Getenv(timeoutEnv))
	if timeout == 0 {
		timeout = time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	store, err := rendezvous.Connect(ctx, cfg)
	if err != nil {
		return report("connect", err)
	}
	ccfg := grpccomm.Config{ChunkBytes: 256 << 10, KeepaliveTime: time.Second, KeepaliveTimeout: 2 * time.Second}
	var comms []*grpccomm.Comm
	newComm := func() (*grpccomm.Comm, error) {
		c, err := grpccomm.New(ctx, store, ccfg)
		if err == nil {
			comms = append(comms, c)
		}
		return c, err
	}
	stage, err := "run", error(nil)
	switch role {
	case "conformance":
		opts := collectivetest.Options{LargeBytes: 256 << 10}
		var c *grpccomm.Comm
		if c, err = newComm(); err != nil {
			stage = "new"
			break
		}
		if err = collectivetest.RunRank(ctx, c, 7, opts); err != nil {
			break
		}
		if c.Size() > 1 {
			if c, err = newComm(); err == nil {
				err = collectivetest.RunRankAbort(ctx, c, opts)
			}
			if err != nil {
				break
			}
		}
		if c, err = newComm(); err == nil {
			err = collectivetest.RunRankClose(ctx, c, opts)
		}
	case "steps":
		var c *grpccomm.Comm
		if c, err = newComm(); err != nil {
			stage = "new"
			break
		}
		steps, _ := strconv.Atoi(os.Getenv("GRPCCOMM_TEST_STEPS"))
		res.Steps, res.Checksum, err = runSteps(ctx, c, steps)
		if err != nil {
			res.FailedAt = time.Now().UnixMilli()
		}
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	for _, c := range comms {
		c.Close()
	}
	store.Close()
	if n := waitGoroutines(before); n > before {
		buf := make([]byte, 1<<20)
		res.Leaked = fmt.Sprintf("%d goroutines, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
		if err == nil {
			err = errors.New("goroutines left after Close")
		}
	}
	if err != nil {
		return report(stage, err)
	}
	return report("done", nil)
}

// waitGoroutines waits up to 5 s for the number of goroutines to fall to
// want and returns the last count.
func waitGoroutines(want int) int {
	deadline := time.Now().Add(5 * time.Second)
	n := runtime.NumGoroutine()
	for n > want && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		n = runtime.NumGoroutine()
	}
	return n
}

// stepElems is the number of float32 elements of a step's all-reduce.
const stepElems = 1 << 20

// runSteps runs steps (0: until an error) of a mock training step: an
// all-reduce (sum) of float32 gradients and an all-gather of bytes, each
// waited under a deadline far longer than a step takes. After each step it
// checks the results against closed forms and prints "step k". It returns
// the steps done and a checksum of the last gathered buffer.
func runSteps(ctx context.Context, c *grpccomm.Comm, steps int) (int, uint64, error) {
	n, r := c.Size(), c.Rank()
	grad := make([]float32, stepElems)
	gathered := make(buffer.HostBuffer, n*4096)
	var sum uint64
	for k := 0; steps == 0 || k < steps; k++ {
		for i := range grad {
			grad[i] = float32(r + 1 + i%7 + k) // exact in float32
		}
		buf := collective.ToBytes(grad)
		own := gathered[r*4096 : (r+1)*4096]
		for i := range own {
			own[i] = byte(r*31 + i + k)
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := c.Start(
			collective.Op{Kind: collective.OpAllReduce, Dst: buf, Src: buf, DType: buffer.Float32, Reduce: collective.Sum},
			collective.Op{Kind: collective.OpAllGather, Dst: gathered, Src: own},
		).Wait(wctx)
		cancel()
		if err != nil {
			return k, sum, err
		}
		got := collective.FromBytes[float32](buf)
		for i, v := range got {
			want := float32(n*(n+1)/2 + n*(i%7+k))
			if v != want {
				return k, sum, fmt.Errorf("step %d: all-reduce element %d = %v, want %v", k, i, v, want)
			}
		}
		sum = 0
		for p := range n {
			for i := range 4096 {
				if b := gathered[p*4096+i]; b != byte(p*31+i+k) {
					return k, sum, fmt.Errorf("step %d: all-gather byte %d of rank %d = %d", k, i, p, b)
				}
			}
		}
		for _, b := range gathered {
			sum = sum*31 + uint64(b)
		}
		fmt.Printf("step %d\n", k+1)
	}
	return steps, sum, nil
}

// proc is a rank process started by a test.
type proc struct {
	rank   int
	cmd    *exec.Cmd
	lines  chan string // stdout, line by line; closed at EOF
	result chan rankResult
	done   chan struct{} // closed when the process has exited
	err    error         // of cmd.Wait
	output strings.Builder
	mu     sync.Mutex
}

// spawn starts the test binary as one rank with env (KEY=VALUE entries
// added to this process's environment), through wrap if not nil (a command
// prefix such as "ip netns exec NS"). The process is killed at the end of
// t if it still runs.
func spawn(t *testing.T, rank int, env []string, wrap ...string) *proc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args := append(append([]string(nil), wrap...), exe)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{rank: rank, cmd: cmd, lines: make(chan string, 1024), result: make(chan rankResult, 1), done: make(chan struct{})}
	cmd.Stderr = &lockedWriter{p}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.output.WriteString(line + "\n")
			p.mu.Unlock()
			if js, ok := strings.CutPrefix(line, resultPrefix); ok {
				var res rankResult
				if json.Unmarshal([]byte(js), &res) == nil {
					p.result <- res
				}
				continue
			}
			select {
			case p.lines <- line:
			default:
			}
		}
		close(p.lines)
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// lockedWriter appends stderr to the process's output.
type lockedWriter struct{ p *proc }

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.output.Write(b)
}

// wait waits for p to exit (at most d) and returns its result.
func (p *proc) wait(t *testing.T, d time.Duration) rankResult {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Fatalf("rank %d did not exit within %v; output:\n%s", p.rank, d, p.out())
	}
	select {
	case res := <-p.result:
		if res.Leaked != "" {
			t.Errorf("rank %d: %s", p.rank, res.Leaked)
		}
		return res
	default:
		t.Fatalf("rank %d exited (%v) without a result; output:\n%s", p.rank, p.err, p.out())
		return rankResult{}
	}
}

func (p *proc) out() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.output.String()
}

// waitLine waits until p prints line.
func (p *proc) waitLine(t *testing.T, line string, d time.Duration) {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				t.Fatalf("rank %d exited before printing %q; output:\n%s", p.rank, line, p.out())
			}
			if l == line {
				return
			}
		case <-timeout:
			t.Fatalf("rank %d did not print %q within %v; output:\n%s", p.rank, line, d, p.out())
		}
	}
}

// freePort returns a TCP port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	lis, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().(*net.TCPAddr).Port
}

// rankEnv is the environment of rank r of n, as `distopt run` sets it.
func rankEnv(t *testing.T, r, n, port int, extra ...string) []string {
	cfg := rendezvous.Config{Rank: r, WorldSize: n, LocalRank: r, LocalWorldSize: n, MasterAddr: "127.0.0.1", MasterPort: port, RunID: t.Name(), Secret: "process-test"}
	return append(cfg.Environ(), extra...)
}

func TestProcessesConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	for _, n := range []int{2, 3, 4} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			port := freePort(t)
			procs := make([]*proc, n)
			for r := range n {
				procs[r] = spawn(t, r, rankEnv(t, r, n, port, roleEnv+"=conformance"))
			}
			for _, p := range procs {
				if res := p.wait(t, 90*time.Second); res.Err != "" || res.Stage != "done" {
					t.Errorf("rank %d: stage %s: %s\noutput:\n%s", p.rank, res.Stage, res.Err, p.out())
				}
			}
		})
	}
}

// TestProcessKilled kills one rank with SIGKILL in the middle of its steps:
// every survivor must fail promptly (long before its 30 s deadline) with a
// *collective.RankError naming the killed rank and matching ErrPeerLost.
func TestProcessKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	for _, tc := range []struct{ n, victim int }{{2, 1}, {3, 2}, {4, 0}} {
		t.Run(fmt.Sprintf("n=%d/victim=%d", tc.n, tc.victim), func(t *testing.T) {
			port := freePort(t)
			procs := make([]*proc, tc.n)
			for r := range tc.n {
				procs[r] = spawn(t, r, rankEnv(t, r, tc.n, port, roleEnv+"=steps"))
			}
			procs[tc.victim].waitLine(t, "step 3", 60*time.Second)
			if err := procs[tc.victim].cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			for _, p := range procs {
				if p.rank == tc.victim {
					<-p.done
					continue
				}
				res := p.wait(t, 20*time.Second)
				took := res.failedAt().Sub(killed)
				t.Logf("rank %d after %v: %s", p.rank, took.Round(time.Millisecond), res.Err)
				if res.Stage != "run" || res.Blamed != tc.victim || !res.PeerLost {
					t.Errorf("rank %d: stage %s, blamed %d, peer lost %v: %s", p.rank, res.Stage, res.Blamed, res.PeerLost, res.Err)
				}
				if took > 5*time.Second {
					t.Errorf("rank %d failed %v after the kill", p.rank, took)
				}
			}
		})
	}
}

// TestProcessHung stops one rank with SIGSTOP in the middle of its steps:
// its connections stay open but nothing comes from it. The survivors must
// fail naming it, and say that it stopped responding and since when (not
// "peer lost: context canceled").
func TestProcessHung(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	const n, victim = 3, 2
	port := freePort(t)
	procs := make([]*proc, n)
	for r := range n {
		procs[r] = spawn(t, r, rankEnv(t, r, n, port, roleEnv+"=steps"))
	}
	procs[victim].waitLine(t, "step 3", 60*time.Second)
	if err := procs[victim].cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer procs[victim].cmd.Process.Signal(syscall.SIGCONT)
	defer procs[victim].cmd.Process.Signal(syscall.SIGKILL)
	for _, p := range procs[:victim] {
		res := p.wait(t, 60*time.Second)
		t.Logf("rank %d: %s", p.rank, res.Err)
		if res.Stage != "run" || res.Blamed != victim || !res.PeerLost ||
			!strings.Contains(res.Err, "stopped responding") || !strings.Contains(res.Err, "nothing received from it since") {
			t.Errorf("rank %d: stage %s, blamed %d, peer lost %v: %s", p.rank, res.Stage, res.Blamed, res.PeerLost, res.Err)
		}
	}
}

// TestProcessStartupFailures: the ranks that start must fail with a clear
// error by their deadline when a rank never starts, when one rank has
// another WORLD_SIZE, and when the master port is taken.
func TestProcessStartupFailures(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	const deadline = 2 * time.Second
	type want struct {
		stage  string
		check  func(rankResult) bool
		substr string
	}
	deadlineWant := func(s string) want {
		return want{"connect", func(r rankResult) bool { return r.Deadline }, s}
	}
	// A rank whose deadline comes a moment after rank 0's finds the store
	// stopped.
	joinWant := want{"connect", func(r rankResult) bool {
		return r.Deadline || strings.Contains(r.Err, "rank 0's store stopped while")
	}, "ranks [2] of 3"}
	memberWant := want{"connect", func(r rankResult) bool { return r.Member }, "WORLD_SIZE differs between ranks"}
	tests := []struct {
		name  string
		n     int
		skip  int                           // a rank not started, or -1
		env   func(r, n, port int) []string // changes to rank r's environment
		taken bool                          // hold the master port
		want  []want                        // by rank
	}{
		{name: "rank never starts", n: 3, skip: 2,
			want: []want{deadlineWant("ranks [2] of 3 never joined"), joinWant}},
		{name: "wrong world size", n: 3, skip: -1,
			env: func(r, n, port int) []string {
				if r == 2 {
					return []string{"WORLD_SIZE=4"}
				}
				return nil
			},
			want: []want{memberWant, memberWant, memberWant}},
		{name: "port taken", n: 2, skip: -1, taken: true,
			want: []want{{"connect", func(r rankResult) bool { return r.PortUsed }, "another process listens on it"},
				deadlineWant("could not be reached")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			port := freePort(t)
			if tc.taken {
				lis, err := net.Listen("tcp", ":"+strconv.Itoa(port))
				if err != nil {
					t.Fatal(err)
				}
				defer lis.Close()
				go func() { // accept and say nothing, as a foreign server would
					for {
						conn, err := lis.Accept()
						if err != nil {
							return
						}
						defer conn.Close()
					}
				}()
			}
			var procs []*proc
			start := time.Now()
			for r := range tc.n {
				if r == tc.skip {
					continue
				}
				env := rankEnv(t, r, tc.n, port, roleEnv+"=steps", timeoutEnv+"="+deadline.String())
				if tc.env != nil {
					env = append(env, tc.env(r, tc.n, port)...)
				}
				procs = append(procs, spawn(t, r, env))
			}
			for i, p := range procs {
				res := p.wait(t, deadline+20*time.Second)
				w := tc.want[i]
				if res.Stage != w.stage || !w.check(res) || !strings.Contains(res.Err, w.substr) {
					t.Errorf("rank %d: stage %s: %s; want stage %s and %q", p.rank, res.Stage, res.Err, w.stage, w.substr)
				}
			}
			if took := time.Since(start); took > deadline+10*time.Second {
				t.Errorf("ranks took %v with a deadline of %v", took, deadline)
			}
		})
	}
}
