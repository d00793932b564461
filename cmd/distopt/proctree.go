package main

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// prSetChildSubreaper is prctl's PR_SET_CHILD_SUBREAPER (linux/prctl.h).
const prSetChildSubreaper = 36

// becomeSubreaper makes the orphaned descendants of this process its
// children instead of PID 1's, so that it can find, kill and reap them.
func becomeSubreaper() error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		return errno
	}
	return nil
}

// procInfo is what the process tree keeps of one process.
type procInfo struct {
	ppid   int
	zombie bool // exited, not yet reaped
}

// readProc returns the parent of process pid from /proc/PID/stat, and
// whether it exists.
func readProc(pid int) (procInfo, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procInfo{}, false
	}
	// "PID (COMM) STATE PPID ...": COMM may hold anything, ") " included.
	i := bytes.LastIndex(b, []byte(") "))
	if i < 0 {
		return procInfo{}, false
	}
	fields := bytes.Fields(b[i+2:])
	if len(fields) < 2 {
		return procInfo{}, false
	}
	ppid, err := strconv.Atoi(string(fields[1]))
	return procInfo{ppid: ppid, zombie: fields[0][0] == 'Z' || fields[0][0] == 'X'}, err == nil
}

// processes returns every process of the host, read from /proc.
func processes() map[int]procInfo {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	procs := make(map[int]procInfo, len(entries))
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			if info, ok := readProc(pid); ok {
				procs[pid] = info
			}
		}
	}
	return procs
}

// descendants returns the living descendants of process root, leaving out
// the processes in spare and their descendants, from procs (a scan at one
// moment: a process forked after it is missed, so killers scan again until
// none is left).
func descendants(procs map[int]procInfo, root int, spare map[int]bool) []int {
	children := map[int][]int{}
	for pid, info := range procs {
		if !info.zombie {
			children[info.ppid] = append(children[info.ppid], pid)
		}
	}
	var out []int
	queue := children[root]
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		if !spare[pid] {
			out = append(out, pid)
			queue = append(queue, children[pid]...)
		}
	}
	return out
}

// signalTree sends sig to the process group pgid (when positive) and to
// every living descendant of this process but those in spare and their
// descendants. It returns how many processes it signalled.
func signalTree(pgid int, sig syscall.Signal, spare map[int]bool) int {
	if pgid > 0 {
		_ = syscall.Kill(-pgid, sig)
	}
	n := 0
	for _, pid := range descendants(processes(), os.Getpid(), spare) {
		if syscall.Kill(pid, sig) == nil {
			n++
		}
	}
	return n
}

// killOrphans kills every descendant of this process but those in spare and
// their descendants, and reaps those of its children that have exited
// (zombies included) without waiting. It returns how many it killed.
func killOrphans(spare map[int]bool) int {
	self := os.Getpid()
	procs := processes()
	pids := descendants(procs, self, spare)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for pid, info := range procs {
		if info.ppid == self && !spare[pid] {
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		}
	}
	return len(pids)
}
