package vm

import (
	"os/exec"
	"syscall"
)

// setProcAttr puts qemu in its own process group (a Ctrl-C reaches only
// the launcher, which powers the machines off in order) and kills it if
// the launcher dies, so that no VM outlives it.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
