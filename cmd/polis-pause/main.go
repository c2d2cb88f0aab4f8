// Command polis-pause is the process of Polis' pod sandbox (pause) image:
// the first container of every Pod, which holds the Pod's namespaces open
// while its application containers come and go. It does nothing but wait:
// it sleeps until SIGTERM or SIGINT (the runtime's stop) and then exits 0.
//
// When a Pod shares one PID namespace between its containers, this process
// is that namespace's PID 1, and the kernel makes it the parent of every
// orphaned process in the Pod. A PID 1 that never waits for them leaves
// them as zombies until the Pod ends, so on each SIGCHLD it reaps every
// exited child. It also makes itself a child subreaper, so that it reaps
// orphans the same way when it is not PID 1.
//
// It is tiny and static (no libc), built by launch/systembuild into the
// image archive images/pause.tar of the node's system disk, which the
// node loads into containerd itself: no node pulls a sandbox image.
package main

import (
	"os"
	"os/signal"

	"golang.org/x/sys/unix"
)

func main() {
	os.Exit(run(nil))
}

// run waits for a stop signal, reaping children meanwhile, and returns
// the exit code. ready, if not nil, is called once the stop signals are
// caught (for the tests: before that, a signal's default action applies).
func run(ready func()) int {
	// Signals to PID 1 are dropped by the kernel unless a handler is
	// installed, which Notify does: without it the runtime's SIGTERM
	// would be ignored and the stop would wait for its SIGKILL.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT, unix.SIGCHLD)
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		os.Stderr.WriteString("polis-pause: cannot become a child subreaper: " + err.Error() + "\n")
	}
	reap() // children that exited before Notify took SIGCHLD
	if ready != nil {
		ready()
	}
	for sig := range sigs {
		if sig == unix.SIGCHLD {
			reap()
			continue
		}
		return 0
	}
	return 0
}

// reap waits for every exited child without blocking: one SIGCHLD may
// stand for several children, since pending signals do not queue.
func reap() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return // no exited child left (0), or no child at all (ECHILD)
		}
	}
}
