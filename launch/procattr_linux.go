package launch

import "syscall"

// sysProcAttr puts a node in its own process group, so that a Ctrl-C in the
// terminal reaches only the launcher (which stops the nodes in order), and
// has the kernel kill it if the launcher dies without stopping it.
//
// Pdeathsig fires when the thread that started the child exits, not the
// process; Go keeps its threads, so in practice that is the launcher's
// death, and Close stops the nodes on every ordinary exit anyway.
//
// The signal is armed by the thread that execs the node, and a node that
// reboots execs itself again (polis-node's reexec): it arms the signal
// again itself, told the launcher's PID by LauncherPIDEnv.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
