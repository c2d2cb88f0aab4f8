package pid1

import (
	"os"
	"os/signal"

	"golang.org/x/sys/unix"
)

// reapOrphans waits for every child that exits, so that processes
// orphaned anywhere in the machine (and re-parented to PID 1) do not stay
// zombies. The agent starts no processes with os/exec; if it ever does,
// this must reap only PIDs that are not its own, or os/exec's Wait would
// lose the exit status to it.
func reapOrphans() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, unix.SIGCHLD)
	for range sigs {
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
