//go:build unix && !linux

package launch

import "syscall"

// sysProcAttr puts a node in its own process group, so that a Ctrl-C in the
// terminal reaches only the launcher, which stops the nodes in order. Only
// Linux can also have a node killed when the launcher dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
