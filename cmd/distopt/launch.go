package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/distopt/distopt/collective/rendezvous"
)

// launcher runs the ranks of one host and supervises them.
type launcher struct {
	stdout, stderr io.Writer
	grace          time.Duration // between SIGTERM and SIGKILL
	env            []string      // variables of the job for every rank, beside its rendezvous.Config's
}

// rankProc is one started rank.
type rankProc struct {
	rank     int
	name     string // "rank R", or "node K rank R" in a job of several hosts
	cmd      *exec.Cmd
	out, err *prefixer
	exited   bool
}

// exit is the end of one rank.
type exit struct {
	p      *rankProc
	status int // exit status; 128+N when killed by signal N
	err    error
}

// run starts program once per configuration and waits for all ranks (see
// the package documentation for the rules). It returns the exit status of
// `distopt run`. It is longer than most functions because it is the
// launcher's one event loop: start, forward signals, collect exits, stop the
// others on the first failure; each case is a few lines.
func (l *launcher) run(program []string, cfgs []rendezvous.Config) int {
	stderr := &syncWriter{w: &dropper{w: l.stderr}}
	logf := func(format string, args ...any) {
		stderr.write(fmt.Appendf(nil, "distopt run: "+format+"\n", args...))
	}
	stdout := &syncWriter{w: &dropper{w: l.stdout, failed: func(err error) {
		logf("standard output failed (%v): dropping the ranks' output to it; the job goes on", err)
	}}}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	// A write to a closed stdout (`distopt run ... | head -1`) must fail
	// with EPIPE, which dropper handles, rather than kill the launcher:
	// Notify, not Ignore, so that the ranks keep the default action.
	pipes := make(chan os.Signal, 1)
	signal.Notify(pipes, syscall.SIGPIPE)
	defer signal.Stop(pipes)

	exits := make(chan exit, len(cfgs))
	var procs []*rankProc
	signalAll := func(sig syscall.Signal) {
		for _, p := range procs {
			if !p.exited {
				// The rank leads its own process group: reach its children too.
				_ = syscall.Kill(-p.cmd.Process.Pid, sig)
			}
		}
	}
	for _, cfg := range cfgs {
		p, err := l.start(program, cfg, stdout, stderr)
		if err != nil {
			logf("starting %s: %v", rankName(cfg), err)
			signalAll(syscall.SIGKILL)
			for range procs {
				<-exits
			}
			if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
				return 127
			}
			return 1
		}
		procs = append(procs, p)
		go func() {
			err := p.cmd.Wait()
			p.out.flush()
			p.err.flush()
			exits <- exit{p: p, status: exitStatus(p.cmd.ProcessState), err: err}
		}()
	}

	status, failed, signalled := 0, false, false
	var kill <-chan time.Time
	for running := len(procs); running > 0; {
		select {
		case e := <-exits:
			running--
			e.p.exited = true
			if e.status == 0 || failed {
				continue
			}
			failed, status = true, e.status
			how := ""
			if e.status > 128 && e.err != nil {
				how = " (" + e.err.Error() + ")"
			}
			logf("%s exited with status %d%s; stopping the other ranks", e.p.name, e.status, how)
			if running > 0 {
				signalAll(syscall.SIGTERM)
				kill = time.After(l.grace)
			}
		case sig := <-sigs:
			if signalled {
				logf("second signal (%v): killing every rank", sig)
				signalAll(syscall.SIGKILL)
				continue
			}
			signalled = true
			logf("forwarding %v to every rank", sig)
			signalAll(sig.(syscall.Signal))
		case <-kill:
			logf("ranks still running %v after SIGTERM: killing them", l.grace)
			signalAll(syscall.SIGKILL)
		}
	}
	return status
}

// start starts the rank of cfg.
func (l *launcher) start(program []string, cfg rendezvous.Config, stdout, stderr *syncWriter) (*rankProc, error) {
	name := rankName(cfg)
	prefix := "[" + name + "] "
	p := &rankProc{rank: cfg.Rank, name: name, out: newPrefixer(stdout, prefix), err: newPrefixer(stderr, prefix)}
	p.cmd = exec.Command(program[0], program[1:]...)
	// Later entries win: the job's variables replace inherited ones.
	p.cmd.Env = append(append(os.Environ(), cfg.Environ()...), l.env...)
	p.cmd.Stdin = nil
	p.cmd.Stdout = p.out
	p.cmd.Stderr = p.err
	// Each rank leads its own process group (signalAll reaches its
	// children), and the kernel kills it when the launcher dies, however it
	// dies (SIGKILL included): no rank outlives its launcher.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// Output still open after the rank exits (a child of the rank holding
	// it) is not waited for long.
	p.cmd.WaitDelay = time.Second
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	return p, nil
}

// rankName names the rank of cfg in the launcher's output: "rank R" on one
// host, "node K rank R" in a job of several hosts (K = GROUP_RANK, the
// index of this host), so that the output of every host says where a
// failed rank ran.
func rankName(cfg rendezvous.Config) string {
	if cfg.WorldSize == cfg.LocalWorldSize {
		return fmt.Sprintf("rank %d", cfg.Rank)
	}
	return fmt.Sprintf("node %d rank %d", cfg.Rank/cfg.LocalWorldSize, cfg.Rank)
}

// dropper passes writes to w until one fails (a closed pipe), calls failed
// (if set) with that error, and then drops every later write: output that
// nobody reads must not stop the job. Calls are serialized by syncWriter.
type dropper struct {
	w      io.Writer
	failed func(error)
	broken bool
}

func (d *dropper) Write(b []byte) (int, error) {
	if d.broken {
		return len(b), nil
	}
	if _, err := d.w.Write(b); err != nil {
		d.broken = true
		if d.failed != nil {
			d.failed(err)
		}
	}
	return len(b), nil
}

// exitStatus is the status a shell would report for st: the exit code, or
// 128+N for a process killed by signal N.
func exitStatus(st *os.ProcessState) int {
	if st == nil {
		return 1
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return st.ExitCode()
}
