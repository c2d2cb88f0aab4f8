package controlplane

import (
	"github.com/polis-os/polis/kube/process"
	"github.com/polis-os/polis/supervisor"
)

// component is one control-plane process: its subcommand of the bundle and
// its flags.
type component struct {
	name string
	args []string
}

// runComponent is the runnable of one component (kube/process): it fails
// when the process exits, so the supervisor restarts that component alone,
// and stops it when its context ends; the status follows both.
func (r *Runner) runComponent(c component) supervisor.Runnable {
	cmd := process.Command{Path: r.cfg.Bundle, Args: append([]string{c.name}, c.args...), Dir: r.cfg.Dir}
	return process.Runnable(cmd, r.cfg.StopGrace, process.Hooks{
		Started: func(pid int) { r.setRunning(c.name, pid) },
		Exited:  func(err error) { r.setExited(c.name, err) },
	})
}
