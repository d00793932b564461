package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"
)

// treeChild runs the child modes that start processes of their own:
//
//	tree THEN   start two grandchildren (sleepers), one in this process
//	            group and one in a session of its own, print their pids
//	            ("grandchild P") and "ready"; then, THEN = wait: sleep a
//	            minute; THEN = exit: exit 0 at once; THEN = exit-deaf: the
//	            same, but the grandchildren ignore SIGTERM
//	sleeper [deaf]  sleep a minute (ignoring SIGTERM with deaf)
//	deaf        print "ready" and sleep a minute, ignoring SIGTERM
//
// It reports whether args named one of them.
func treeChild(args []string) (int, bool) {
	switch args[0] {
	case "sleeper":
		if len(args) > 1 && args[1] == "deaf" {
			signal.Ignore(syscall.SIGTERM)
		}
		time.Sleep(time.Minute)
		return 0, true
	case "deaf":
		signal.Ignore(syscall.SIGTERM)
		fmt.Println("ready")
		time.Sleep(time.Minute)
		return 0, true
	case "tree":
	default:
		return 0, false
	}
	exe, _ := os.Executable()
	sleeper := []string{"child", "sleeper"}
	if args[1] == "exit-deaf" {
		sleeper = append(sleeper, "deaf")
	}
	for _, setsid := range []bool{false, true} {
		cmd := exec.Command(exe, sleeper...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: setsid}
		if err := cmd.Start(); err != nil {
			fmt.Println(err)
			return 3, true
		}
		fmt.Printf("grandchild %d\n", cmd.Process.Pid)
	}
	fmt.Println("ready")
	if args[1] == "wait" {
		time.Sleep(time.Minute)
	}
	return 0, true
}

// treePIDs returns the pids of every process of the ranks that l started:
// those the ranks printed ("pid P", "grandchild P") and their ancestors
// below the launcher (supervisors, shells).
func (l *launched) treePIDs(t *testing.T) []int {
	t.Helper()
	var pids []int
	for _, line := range l.stdout.lines() {
		var rank, pid int
		if n, _ := fmt.Sscanf(line, "[rank %d] grandchild %d", &rank, &pid); n == 2 {
			pids = append(pids, pid)
		}
	}
	launcher := l.cmd.Process.Pid
	for _, pid := range l.pids() {
		pids = append(pids, pid)
		for p := pid; ; {
			info, ok := readProc(p)
			if !ok {
				t.Fatalf("process %d, an ancestor of rank process %d, is gone", p, pid)
			}
			if info.ppid == launcher {
				break
			}
			if info.ppid <= 1 {
				t.Fatalf("rank process %d does not descend from the launcher %d", pid, launcher)
			}
			p = info.ppid
			pids = append(pids, p)
		}
	}
	return pids
}

// TestRunLauncherKilledKillsTree is issue 38's first case: SIGKILL of the
// launcher whose ranks are shells running the program, which starts
// processes of its own (one in a session of its own): none survives.
func TestRunLauncherKilledKillsTree(t *testing.T) {
	exe := testBinary(t)
	l := launchProgram(t, []string{"--nproc-per-node", "2"}, "sh", "-c", exe+" child tree wait; echo x")
	waitReady(t, l, 2)
	pids := l.treePIDs(t)
	if len(pids) < 2*4 { // per rank: sh, the program, two grandchildren
		t.Fatalf("pids %v, want at least 8\n%s", pids, l.stdout)
	}
	if err := l.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-l.done
	waitGone(t, pids, 30*time.Second)
}

// TestRunLeftoversKilled: ranks that exit 0 and leave processes behind (in
// their process group and out of it; ignoring SIGTERM, which the grace
// period ends) end the job with status 0, and the processes they left die.
func TestRunLeftoversKilled(t *testing.T) {
	for _, then := range []string{"exit", "exit-deaf"} {
		t.Run(then, func(t *testing.T) {
			l := launch(t, []string{"--nproc-per-node", "2", "--grace", "200ms"}, "tree", then)
			if status := l.wait(t, 40*time.Second); status != 0 {
				t.Fatalf("status %d\nstderr:\n%s", status, l.stderr)
			}
			var pids []int
			for _, line := range l.stdout.lines() {
				var rank, pid int
				if n, _ := fmt.Sscanf(line, "[rank %d] grandchild %d", &rank, &pid); n == 2 {
					pids = append(pids, pid)
				}
			}
			if len(pids) != 4 {
				t.Fatalf("grandchildren %v, want 4\n%s", pids, l.stdout)
			}
			waitGone(t, pids, 30*time.Second)
		})
	}
}

// TestRunSignalEscalates is issue 38's second case: ranks that ignore the
// SIGTERM forwarded from the launcher get SIGKILL after --grace.
func TestRunSignalEscalates(t *testing.T) {
	l := launch(t, []string{"--nproc-per-node", "2", "--grace", "300ms"}, "deaf")
	waitReady(t, l, 2)
	pids := l.treePIDs(t)
	if err := l.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The ranks sleep a minute: a launcher that does not escalate waits.
	if status := l.wait(t, 40*time.Second); status != 128+int(syscall.SIGKILL) {
		t.Errorf("status %d, want 137\nstderr:\n%s", status, l.stderr)
	}
	if want := "ranks still running 300ms after SIGTERM: killing them"; !strings.Contains(l.stderr.String(), want) {
		t.Errorf("stderr lacks %q:\n%s", want, l.stderr)
	}
	waitGone(t, pids, 30*time.Second)
}

// TestRunSupervisorKilled: SIGKILL of one rank's supervisor kills that rank
// and what it started (the launcher adopts them), and ends the job.
func TestRunSupervisorKilled(t *testing.T) {
	l := launch(t, []string{"--nproc-per-node", "2", "--grace", "300ms"}, "tree", "wait")
	waitReady(t, l, 2)
	pids := l.treePIDs(t)
	launcher := l.cmd.Process.Pid
	var supervisors []int
	for _, pid := range pids {
		if info, ok := readProc(pid); ok && info.ppid == launcher {
			supervisors = append(supervisors, pid)
		}
	}
	if len(supervisors) != 2 {
		t.Fatalf("supervisors %v among %v", supervisors, pids)
	}
	if err := syscall.Kill(supervisors[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if status := l.wait(t, 40*time.Second); status != 128+int(syscall.SIGKILL) {
		t.Errorf("status %d, want 137\nstderr:\n%s", status, l.stderr)
	}
	waitGone(t, pids, 30*time.Second)
}

// TestRunVerbose: -v logs the supervisors and ranks started, with their
// pids, and a rank's end.
func TestRunVerbose(t *testing.T) {
	l := launch(t, []string{"--nproc-per-node", "2", "-v"}, "env")
	if status := l.wait(t, 30*time.Second); status != 0 {
		t.Fatalf("status %d\nstderr:\n%s", status, l.stderr)
	}
	out := l.stderr.String()
	for _, want := range []string{
		`level=DEBUG msg="distopt run: supervisor started" rank=0 pid=`,
		`level=DEBUG msg="distopt run: supervisor started" rank=1 pid=`,
		`[rank 1] time=`, `msg="distopt run: rank started" pid=`,
		`level=DEBUG msg="distopt run: rank ended" rank=0 status=0`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stderr lacks %q:\n%s", want, out)
		}
	}
	quiet := launch(t, []string{"--nproc-per-node", "1"}, "env")
	if status := quiet.wait(t, 30*time.Second); status != 0 || strings.Contains(quiet.stderr.String(), "DEBUG") {
		t.Errorf("without -v: status %d, stderr:\n%s", status, quiet.stderr)
	}
}
