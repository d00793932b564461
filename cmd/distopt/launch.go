package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
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
	verbose        bool          // debug output (-v)
	log            *slog.Logger  // set by run
}

// rankProc is one started rank.
type rankProc struct {
	rank     int
	name     string // "rank R", or "node K rank R" in a job of several hosts
	cmd      *exec.Cmd
	out, err *prefixer
	control  *os.File // the supervisor's control pipe (see supervisorEnv)
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
	l.log = newLogger(stderr, l.verbose)
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
	// Processes of a rank whose supervisor died become the launcher's.
	if err := becomeSubreaper(); err != nil {
		l.log.Warn("distopt run: cannot become a child subreaper", "err", err)
	}
	defer l.killOrphans(nil)

	exits := make(chan exit, len(cfgs))
	procs, err := l.startAll(program, cfgs, stdout, stderr, exits)
	if err != nil {
		logf("%v", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return 127
		}
		return 1
	}
	signalAll := procs.signal
	status, failed, signalled := 0, false, false
	var kill <-chan time.Time
	for running := len(procs); running > 0; {
		select {
		case e := <-exits:
			running--
			e.p.exited = true
			e.p.control.Close()
			l.log.Debug("distopt run: rank ended", "rank", e.p.rank, "status", e.status)
			if ps := e.p.cmd.ProcessState; ps != nil && !ps.Exited() {
				// The supervisor itself was killed: its rank's processes
				// are the launcher's now.
				l.killOrphans(supervisors(procs))
			}
			if e.status == 0 || failed {
				continue
			}
			failed, status = true, e.status
			logf("%s exited with status %d%s; stopping the other ranks", e.p.name, e.status, signalNote(e.status))
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
			if kill == nil {
				kill = time.After(l.grace)
			}
		case <-kill:
			logf("ranks still running %v after SIGTERM: killing them", l.grace)
			signalAll(syscall.SIGKILL)
		}
	}
	return status
}

// ranks are the started ranks of the launcher.
type ranks []*rankProc

// signal passes sig to the supervisor of every rank still running, which
// passes it to the rank's process group; SIGKILL kills every process of
// the rank.
func (procs ranks) signal(sig syscall.Signal) {
	for _, p := range procs {
		if !p.exited {
			_, _ = p.control.Write([]byte{byte(sig)})
		}
	}
}

// startAll starts the rank of each configuration; each one's end goes to
// exits. If one fails to start, it kills those started, waits for them and
// returns the error.
func (l *launcher) startAll(program []string, cfgs []rendezvous.Config, stdout, stderr *syncWriter, exits chan exit) (ranks, error) {
	var procs ranks
	for _, cfg := range cfgs {
		p, err := l.start(program, cfg, stdout, stderr)
		if err != nil {
			procs.signal(syscall.SIGKILL)
			for range procs {
				<-exits
			}
			return nil, fmt.Errorf("starting %s: %w", rankName(cfg), err)
		}
		procs = append(procs, p)
		go func() {
			err := p.cmd.Wait()
			p.out.flush()
			p.err.flush()
			exits <- exit{p: p, status: exitStatus(p.cmd.ProcessState), err: err}
		}()
	}
	return procs, nil
}

// start starts the supervisor of the rank of cfg, which starts the rank
// (see supervisorEnv).
func (l *launcher) start(program []string, cfg rendezvous.Config, stdout, stderr *syncWriter) (*rankProc, error) {
	path, err := exec.LookPath(program[0])
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	name := rankName(cfg)
	prefix := "[" + name + "] "
	p := &rankProc{rank: cfg.Rank, name: name, out: newPrefixer(stdout, prefix), err: newPrefixer(stderr, prefix), control: w}
	// This binary, even if its file was replaced or removed since it started.
	p.cmd = exec.Command("/proc/self/exe", append([]string{path}, program[1:]...)...)
	p.cmd.Args[0] = os.Args[0]
	setting := l.grace.String()
	if l.verbose {
		setting += " v"
	}
	// Later entries win: the job's variables replace inherited ones.
	p.cmd.Env = append(append(append(os.Environ(), cfg.Environ()...), l.env...), supervisorEnv+"="+setting)
	p.cmd.Stdin = nil
	p.cmd.Stdout = p.out
	p.cmd.Stderr = p.err
	p.cmd.ExtraFiles = []*os.File{r} // controlFD
	// Its own process group: a terminal's ^C reaches the launcher alone,
	// which forwards it.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Output still open after the supervisor exits is not waited for long.
	p.cmd.WaitDelay = time.Second
	if err := p.cmd.Start(); err != nil {
		w.Close()
		return nil, err
	}
	l.log.Debug("distopt run: supervisor started", "rank", cfg.Rank, "pid", p.cmd.Process.Pid)
	return p, nil
}

// supervisors returns the supervisors that have not been reaped.
func supervisors(procs ranks) map[int]bool {
	live := map[int]bool{}
	for _, p := range procs {
		if !p.exited {
			live[p.cmd.Process.Pid] = true
		}
	}
	return live
}

// killOrphans kills every process left to the launcher but the supervisors
// in spare. When spare is empty it scans again until none is left, a few
// seconds at most (a process in uninterruptible sleep dies late).
func (l *launcher) killOrphans(spare map[int]bool) {
	for round := range 500 {
		n := killOrphans(spare)
		if n > 0 {
			l.log.Debug("distopt run: killed processes left to the launcher", "count", n)
		}
		if n == 0 || len(spare) > 0 {
			return
		}
		time.Sleep(time.Duration(min(round+1, 20)) * time.Millisecond)
	}
	l.log.Warn("distopt run: processes left to the launcher survive SIGKILL")
}

// signalNote describes an exit status above 128 as the signal that killed
// the process: " (signal: killed)".
func signalNote(status int) string {
	if status <= 128 || status >= 128+65 {
		return ""
	}
	return " (signal: " + syscall.Signal(status-128).String() + ")"
}

// newLogger returns the launcher's logger, writing to w: warnings, and with
// verbose debug messages.
func newLogger(w io.Writer, verbose bool) *slog.Logger {
	level := slog.LevelInfo
	if verbose {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
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
	if ws, ok := st.Sys().(syscall.WaitStatus); ok {
		return exitCode(ws)
	}
	return st.ExitCode()
}
