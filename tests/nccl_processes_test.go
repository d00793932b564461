package tests

// Multi-process tests of collective/nccl: the test binary starts itself
// twice as ranks 0 and 1 of a job on two GPUs (the environment torchrun and
// the distopt launcher set: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT), and TestNCCLWorker does the work of one rank.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/collectivetest"
	"github.com/distopt/distopt/collective/nccl"
	"github.com/distopt/distopt/collective/nccl/nccltest"
	"github.com/distopt/distopt/collective/rendezvous"
	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/cuda/cudatest"
	"github.com/distopt/distopt/internal/cudalink"
	inccl "github.com/distopt/distopt/internal/nccl"
)

// envScenario tells a started process which part to play.
const envScenario = "DISTOPT_NCCL_SCENARIO"

// Fault-test settings: heartbeats every 200 ms, a peer lost after 2 s.
const (
	faultHeartbeat   = 200 * time.Millisecond
	faultPeerTimeout = 2 * time.Second
	// faultDeadline is the deadline of each Wait of the fault test; the
	// survivor must return long before it.
	faultDeadline = 60 * time.Second
)

// rankProc is one started rank.
type rankProc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  strings.Builder
	seen chan string // lines of stdout, also kept in out
	done chan error
}

func (p *rankProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// startRanks starts this test binary as the 2 ranks of a job playing
// scenario.
func startRanks(t *testing.T, scenario string) []*rankProc {
	t.Helper()
	port, err := nccltest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	procs := make([]*rankProc, 2)
	for r := range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^TestNCCLWorker$", "-test.v", "-test.timeout=5m")
		cmd.Env = append(os.Environ(), envScenario+"="+scenario, "NCCL_NVLS_ENABLE=0",
			"RANK="+strconv.Itoa(r), "WORLD_SIZE=2", "LOCAL_RANK="+strconv.Itoa(r), "LOCAL_WORLD_SIZE=2",
			"MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port), "DISTOPT_RUN_ID=nccl-"+scenario)
		pr, pw := io.Pipe()
		cmd.Stdout, cmd.Stderr = pw, pw
		p := &rankProc{cmd: cmd, seen: make(chan string, 1024), done: make(chan error, 1)}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			sc := bufio.NewScanner(pr)
			for sc.Scan() {
				p.mu.Lock()
				p.out.WriteString(sc.Text() + "\n")
				p.mu.Unlock()
				select {
				case p.seen <- sc.Text():
				default:
				}
			}
		}()
		go func() {
			err := cmd.Wait()
			pw.Close()
			p.done <- err
		}()
		procs[r] = p
		t.Cleanup(func() {
			cmd.Process.Kill()
			t.Logf("rank %d output:\n%s", r, p.output())
		})
	}
	return procs
}

// waitProc waits for p to exit within d.
func waitProc(p *rankProc, d time.Duration) error {
	select {
	case err := <-p.done:
		return err
	case <-time.After(d):
		p.cmd.Process.Kill()
		return fmt.Errorf("still running after %v", d)
	}
}

// requireTwoGPUs skips (or fails, under DISTOPT_REQUIRE_GPU=1) without two
// GPUs and NCCL.
func requireTwoGPUs(t *testing.T) {
	t.Helper()
	n, err := cuda.DeviceCount()
	cudatest.Unavailable(t, err)
	if n < 2 {
		cudatest.Unavailable(t, errors.Join(cuda.ErrNoDevice, errors.New("the test needs 2 GPUs")))
	}
	_, err = inccl.Default()
	cudatest.Unavailable(t, err, inccl.ErrNoLibrary)
}

// TestNCCLProcesses runs the conformance suite on two processes, and the
// fault tests: one rank is killed while both run all-reduces; the other
// must return an error long before its deadline.
func TestNCCLProcesses(t *testing.T) {
	requireTwoGPUs(t)
	t.Run("suite", func(t *testing.T) {
		procs := startRanks(t, "suite")
		for r, p := range procs {
			if err := waitProc(p, 5*time.Minute); err != nil {
				t.Errorf("rank %d: %v", r, err)
			}
		}
		for r, p := range procs {
			if !strings.Contains(p.output(), "WORKER-OK") {
				t.Errorf("rank %d did not finish its checks", r)
			}
		}
	})
	for victim := range 2 {
		t.Run(fmt.Sprintf("kill-rank-%d", victim), func(t *testing.T) {
			procs := startRanks(t, "loop")
			p := procs[victim]
			deadline := time.After(2 * time.Minute)
		waitLoop:
			for {
				select {
				case line := <-p.seen:
					if strings.Contains(line, "LOOPING") {
						break waitLoop
					}
				case err := <-p.done:
					t.Fatalf("rank %d exited before looping: %v", victim, err)
				case <-deadline:
					t.Fatalf("rank %d never started looping", victim)
				}
			}
			time.Sleep(100 * time.Millisecond)
			if err := p.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			survivor := procs[1-victim]
			if err := waitProc(survivor, time.Minute); err != nil {
				t.Errorf("surviving rank %d: %v", 1-victim, err)
			}
			t.Logf("the survivor exited %v after the kill", time.Since(killed).Round(time.Millisecond))
			if !strings.Contains(survivor.output(), "FAULT-DETECTED") {
				t.Errorf("surviving rank %d did not report the fault", 1-victim)
			}
		})
	}
}

// TestNCCLWorker is one rank of TestNCCLProcesses; run alone, it skips.
func TestNCCLWorker(t *testing.T) {
	scenario := os.Getenv(envScenario)
	if scenario == "" {
		t.Skip("a rank of TestNCCLProcesses, which starts it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	switch scenario {
	case "suite":
		workerSuite(ctx, t)
	case "loop":
		workerLoop(ctx, t)
	case "sub":
		workerSub(ctx, t) // nccl_sub_test.go
	default:
		t.Fatalf("unknown scenario %q", scenario)
	}
}

// ncclWorker opens what every NCCL worker process of these tests needs: its
// place in the job (from the launcher's environment), the GPU of its local
// rank, the job's store, and device buffers on that GPU; all closed when
// the test ends.
func ncclWorker(ctx context.Context, t *testing.T) (rendezvous.Config, *cuda.Device, *rendezvous.Store, *nccltest.Buffers) {
	t.Helper()
	rc, err := rendezvous.FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	dev, err := cuda.Open(rc.LocalRank)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	store, err := rendezvous.Connect(ctx, rc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	bufs := nccltest.NewBuffers(cudalink.PublicDevice(dev))
	t.Cleanup(func() { bufs.Close() }) // runs first: the buffers before the device
	return rc, dev, store, bufs
}

// workerSuite runs collectivetest's per-rank checks: the operations (with
// exact averages), the deadline abort, and the close check, each on a new
// communicator over one store.
func workerSuite(ctx context.Context, t *testing.T) {
	_, dev, store, bufs := ncclWorker(ctx, t)
	opts := bufs.Options(collectivetest.Options{LargeBytes: 4 << 20, Deadline: time.Second, Slack: 5 * time.Second, Timeout: 2 * time.Minute})
	cfg := nccl.Config{Store: store, Device: cudalink.PublicDevice(dev), ExactAvg: true, Heartbeat: 250 * time.Millisecond, PeerTimeout: 5 * time.Second}
	steps := []struct {
		name string
		run  func(c *nccl.Comm) error
	}{
		{"ops", func(c *nccl.Comm) error {
			if err := collectivetest.RunRank(ctx, c, 7, opts); err != nil {
				return err
			}
			return collective.Barrier(ctx, c)
		}},
		{"abort", func(c *nccl.Comm) error { return collectivetest.RunRankAbort(ctx, c, opts) }},
		{"close", func(c *nccl.Comm) error { return collectivetest.RunRankClose(ctx, c, opts) }},
	}
	for _, s := range steps {
		start := time.Now()
		c, err := nccl.New(ctx, cfg)
		if err != nil {
			t.Fatalf("%s: New: %v", s.name, err)
		}
		if s.name == "ops" {
			t.Logf("rank %d of %d on GPU %d, %v", c.Rank(), c.Size(), dev.Ordinal(), c.Library())
		}
		err = s.run(c)
		if cerr := c.Close(); cerr != nil {
			t.Errorf("%s: Close: %v", s.name, cerr)
		}
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		t.Logf("%s: passed in %v", s.name, time.Since(start).Round(time.Millisecond))
		// Keep the ranks in step between communicators.
		if err := store.Barrier(ctx, "step/"+s.name); err != nil {
			t.Fatal(err)
		}
	}
	fmt.Println("WORKER-OK")
}

// workerLoop joins through the environment and runs 256 MiB all-reduces
// until one fails (its peer is killed): the failure must come within the
// peer timeout plus a little, name the lost rank when it says a peer was
// lost, and Close must return.
func workerLoop(ctx context.Context, t *testing.T) {
	c, err := nccl.Join(ctx, nccl.Config{Heartbeat: faultHeartbeat, PeerTimeout: faultPeerTimeout})
	if err != nil {
		t.Fatal(err)
	}
	d := c.Device()
	const n = 256 << 20
	p, err := d.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	buf := buffer.DeviceBuffer{Ptr: uintptr(p), Size: n, Device: d.Ordinal()}
	last := time.Now()
	for i := 0; ; i++ {
		wctx, cancel := context.WithTimeout(ctx, faultDeadline)
		err := c.Start(collective.Op{Kind: collective.OpAllReduce, Dst: buf, Src: buf, DType: buffer.Float32, Reduce: collective.Sum}).Wait(wctx)
		cancel()
		if err != nil {
			took := time.Since(last)
			t.Logf("iteration %d failed after %v: %v", i, took, err)
			var re *collective.RankError
			switch {
			case !errors.As(err, &re) || !errors.Is(err, collective.ErrAborted):
				t.Errorf("error %v is not a *collective.RankError matching ErrAborted", err)
			case took > faultPeerTimeout+3*time.Second:
				t.Errorf("the failure took %v, want at most %v", took, faultPeerTimeout+3*time.Second)
			case errors.Is(err, collective.ErrPeerLost) && re.Rank != 1-c.Rank():
				t.Errorf("the error names rank %d, want %d", re.Rank, 1-c.Rank())
			}
			d.Free(p) // before Close, which closes the device Join opened
			start := time.Now()
			if err := c.Close(); err != nil {
				t.Logf("Close: %v", err)
			}
			t.Logf("Close took %v", time.Since(start).Round(time.Millisecond))
			if !t.Failed() {
				fmt.Printf("FAULT-DETECTED after %v: %v\n", took.Round(time.Millisecond), err)
			}
			return
		}
		last = time.Now()
		if i == 20 {
			fmt.Println("LOOPING")
		}
	}
}
