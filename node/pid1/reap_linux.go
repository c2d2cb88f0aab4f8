package pid1

import (
	"bytes"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// reapOrphans waits for the orphans that exit: processes re-parented to
// PID 1 (a container runtime's shims, whatever their parents left), so
// that they do not stay zombies. It must not reap the agent's own
// children, started with os/exec (containerd, kubelet): their Wait would
// then fail with ECHILD and their exit status would be lost. Go's os/exec
// holds a pidfd for each child it starts, until Wait has reaped it (Go
// 1.23 and later, on Linux 5.4 and later), so a zombie that one of the
// agent's pidfds refers to is left to os/exec, and any other zombie
// child of PID 1 is reaped here.
func reapOrphans() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, unix.SIGCHLD)
	for range sigs {
		reapOnce(os.Getpid())
	}
}

// reapOnce reaps the zombie children of self (this process) that no pidfd
// of its own refers to, and returns their PIDs. One SIGCHLD may stand for
// several exits, so it looks at every zombie.
func reapOnce(self int) []int {
	zombies := zombieChildren(self)
	if len(zombies) == 0 {
		return nil
	}
	own := pidfdTargets()
	var reaped []int
	for _, pid := range zombies {
		if own[pid] {
			continue
		}
		var ws unix.WaitStatus
		if got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil); err == nil && got == pid {
			reaped = append(reaped, pid)
		}
	}
	return reaped
}

// zombieChildren lists the zombie processes whose parent is ppid.
func zombieChildren(ppid int) []int {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var out []int
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		state, parent, err := parseProcStat(b)
		if err != nil || state != 'Z' || parent != ppid {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(d)); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// parseProcStat reads the state and parent PID from a /proc/PID/stat
// line: "PID (COMM) STATE PPID ...", where COMM may itself hold spaces
// and parentheses, so the fields are counted from the last ')'.
func parseProcStat(b []byte) (state byte, ppid int, err error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("malformed stat %q", b)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 || len(f[0]) != 1 {
		return 0, 0, fmt.Errorf("malformed stat %q", b)
	}
	ppid, err = strconv.Atoi(f[1])
	if err != nil {
		return 0, 0, fmt.Errorf("malformed stat %q", b)
	}
	return f[0][0], ppid, nil
}

// pidfdTargets returns the PIDs that this process holds a pidfd for
// (their /proc/self/fdinfo entries have a "Pid:" line).
func pidfdTargets() map[int]bool {
	infos, _ := filepath.Glob("/proc/self/fdinfo/*")
	out := map[int]bool{}
	for _, p := range infos {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if pid, ok := parseFdinfoPid(b); ok {
			out[pid] = true
		}
	}
	return out
}

// parseFdinfoPid finds the "Pid:" line of a pidfd's fdinfo.
func parseFdinfoPid(b []byte) (int, bool) {
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Pid:"); ok {
			pid, err := strconv.Atoi(strings.TrimSpace(v))
			return pid, err == nil && pid > 0
		}
	}
	return 0, false
}
