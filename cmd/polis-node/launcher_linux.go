//go:build linux

package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// The main goroutine stays on the process's first thread, so that main's
// prctl below and the exec of a reboot (reexec) act on the thread the
// kernel counts as the process: the parent-death signal is a property of
// a thread, a thread the Go runtime starts later has none, and an exec
// from such a thread made a rebooted node outlive a killed launcher.
func init() { runtime.LockOSThread() }

// dieWithLauncher arms the parent-death signal again in a node agent that
// polis-launch started (launcherPIDEnv names the launcher): the one
// the launcher asked for at fork does not survive every exec, and a node
// whose launcher was SIGKILLed must not run on unseen. If the launcher has
// already gone, the node exits at once.
func dieWithLauncher() error {
	v := os.Getenv(launcherPIDEnv)
	if v == "" {
		return nil
	}
	pid, err := strconv.Atoi(v)
	if err != nil {
		return fmt.Errorf("%s=%q: not a process ID", launcherPIDEnv, v)
	}
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return fmt.Errorf("arming the signal of the launcher's death: %w", err)
	}
	// Checked after arming: a launcher that dies from here on kills us.
	if ppid := os.Getppid(); ppid != pid {
		return fmt.Errorf("the launcher (pid %d) that started this node is gone (parent is now pid %d)", pid, ppid)
	}
	return nil
}
