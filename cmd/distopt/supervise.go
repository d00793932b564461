package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// The launcher starts each rank through a supervisor: this same binary,
// started with supervisorEnv set to "GRACE" or "GRACE v" (debug output) and
// the rank's program as its arguments. The supervisor is a child subreaper
// that leads no process of the rank's: whatever the rank forks, and however
// its processes reparent, they stay its descendants, so it can kill them
// all. It kills them all when the rank's leader exits (SIGTERM, then SIGKILL
// after the grace period), when the launcher asks, and when the launcher
// dies, SIGKILL included: it reads the launcher's control pipe, whose end
// the kernel closes with the launcher.
const supervisorEnv = "DISTOPT_RUN_SUPERVISOR"

// controlFD is the supervisor's descriptor of the control pipe. Each byte
// the launcher writes is a signal for the rank's process group; SIGKILL
// kills every process of the rank at once. End of file means that the
// launcher is gone: SIGKILL too.
const controlFD = 3

func init() {
	// Before main: a supervisor never runs distopt's commands (or tests).
	if v, ok := os.LookupEnv(supervisorEnv); ok {
		os.Exit(superviseMain(v, os.Args[1:]))
	}
}

// superviseMain runs the supervisor of the rank that runs program.
func superviseMain(setting string, program []string) int {
	graceText, verbose := strings.CutSuffix(setting, " v")
	grace, err := time.ParseDuration(graceText)
	if err != nil || len(program) == 0 {
		fmt.Fprintf(os.Stderr, "distopt run: bad supervisor setting %q for %q\n", setting, program)
		return 2
	}
	s := &supervisor{grace: grace, log: newLogger(os.Stderr, verbose)}
	return s.run(program, os.NewFile(controlFD, "control"))
}

// supervisor is the state of one rank's supervisor.
type supervisor struct {
	grace  time.Duration
	log    *slog.Logger
	leader int // the rank's first process; it leads the rank's process group
}

// reaped is one child of the supervisor that exited.
type reaped struct {
	pid    int
	status syscall.WaitStatus
}

// run starts program, supervises it until no process of the rank is left
// and returns the leader's exit status (128+N when killed by signal N).
func (s *supervisor) run(program []string, control io.ReadCloser) int {
	if err := becomeSubreaper(); err != nil {
		s.log.Warn("distopt run: cannot become a child subreaper: processes that leave the rank's process group may outlive it", "err", err)
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	// A message to the stderr of a launcher that is gone must not end the
	// supervisor; its rank still gets SIGPIPE's default action.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	ctl := make(chan byte, 8)
	go readControl(control, ctl)
	if err := s.start(program); err != nil {
		fmt.Fprintf(os.Stderr, "distopt run: starting %s: %v\n", program[0], err)
		return 127
	}
	exits := make(chan reaped, 8)
	go reapAll(exits)
	return s.loop(exits, ctl, sigs)
}

// start starts the rank's leader in a process group of its own, with this
// supervisor's environment but supervisorEnv and its standard files. The
// kernel kills the leader if the supervisor dies first.
func (s *supervisor) start(program []string) error {
	env := make([]string, 0, len(os.Environ()))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, supervisorEnv+"=") {
			env = append(env, kv)
		}
	}
	path, err := exec.LookPath(program[0])
	if err != nil {
		return err
	}
	// Pdeathsig fires when the forking thread ends: keep it for good.
	runtime.LockOSThread()
	pid, err := syscall.ForkExec(path, program, &syscall.ProcAttr{
		Env:   env,
		Files: []uintptr{0, 1, 2},
		Sys:   &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		return err
	}
	s.leader = pid
	s.log.Debug("distopt run: rank started", "pid", pid, "program", program[0])
	return nil
}

// loop handles the events of the supervisor until its last child is
// reaped, and returns the leader's exit status.
func (s *supervisor) loop(exits <-chan reaped, ctl <-chan byte, sigs <-chan os.Signal) int {
	status, leaderDone, killing := 1, false, false
	var escalate <-chan time.Time
	var sweep *time.Ticker
	kill := func(why string) {
		if killing {
			return
		}
		killing = true
		s.log.Debug("distopt run: killing every process of the rank", "why", why)
		signalTree(s.leader, syscall.SIGKILL, nil)
		// A process that forked just before the scan has children it missed.
		sweep = time.NewTicker(50 * time.Millisecond)
	}
	defer func() {
		if sweep != nil {
			sweep.Stop()
		}
	}()
	var sweeps <-chan time.Time
	for {
		if sweep != nil {
			sweeps = sweep.C
		}
		select {
		case e, ok := <-exits:
			if !ok {
				return status
			}
			if e.pid != s.leader {
				continue
			}
			leaderDone, status = true, exitCode(e.status)
			if n := signalTree(s.leader, syscall.SIGTERM, nil); n > 0 && !killing {
				s.log.Debug("distopt run: the rank's leader exited: stopping the processes it left", "status", status, "left", n)
				escalate = time.After(s.grace)
			}
		case b, ok := <-ctl:
			switch {
			case !ok:
				ctl = nil
				kill("the launcher is gone")
			case syscall.Signal(b) == syscall.SIGKILL:
				kill("the launcher asked")
			default:
				s.forward(syscall.Signal(b), leaderDone)
			}
		case sig := <-sigs:
			s.forward(sig.(syscall.Signal), leaderDone)
		case <-escalate:
			kill(fmt.Sprintf("processes left by the rank still run %v after SIGTERM", s.grace))
		case <-sweeps:
			signalTree(s.leader, syscall.SIGKILL, nil)
		}
	}
}

// forward sends sig to the rank's process group, and once the leader has
// exited to every process the rank left.
func (s *supervisor) forward(sig syscall.Signal, leaderDone bool) {
	s.log.Debug("distopt run: forwarding a signal to the rank", "signal", sig)
	if leaderDone {
		signalTree(s.leader, sig, nil)
		return
	}
	_ = syscall.Kill(-s.leader, sig)
}

// readControl passes the bytes of the control pipe to ctl and closes ctl at
// its end (or on an error: the launcher is gone either way).
func readControl(r io.ReadCloser, ctl chan<- byte) {
	defer close(ctl)
	defer r.Close()
	var b [1]byte
	for {
		if _, err := r.Read(b[:]); err != nil {
			return
		}
		ctl <- b[0]
	}
}

// reapAll reaps every child of this process, orphans adopted as a subreaper
// included, and closes exits once there is none.
func reapAll(exits chan<- reaped) {
	defer close(exits)
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return // ECHILD: no child is left
		}
		exits <- reaped{pid: pid, status: ws}
	}
}

// exitCode is the status a shell reports for ws: the exit code, or 128+N
// for a process killed by signal N.
func exitCode(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}
