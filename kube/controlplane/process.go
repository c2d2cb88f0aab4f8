package controlplane

import (
	"context"

	"go.uber.org/zap"

	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/kube/process"
	"github.com/polis-os/polis/supervisor"
)

// component is one control-plane process: its subcommand of the bundle and
// its flags, and whether it starts only once the apiserver is ready.
type component struct {
	name string
	args []string
	// afterReady holds the process back until the node's apiserver
	// answers /readyz ok (see waitReady).
	afterReady bool
}

// runComponent is the runnable of one component (kube/process): it fails
// when the process exits, so the supervisor restarts that component alone,
// and stops it when its context ends; the status follows both. With
// Config.Cgroup, each start puts the process in the component's own
// cgroup.
func (r *Runner) runComponent(c component) supervisor.Runnable {
	hooks := process.Hooks{
		Started: func(pid int) { r.setRunning(c.name, pid) },
		Exited:  func(err error) { r.setExited(c.name, err) },
	}
	run := func(ctx context.Context) error {
		cmd := process.Command{Path: r.cfg.Bundle, Args: append([]string{c.name}, c.args...), Dir: r.cfg.Dir}
		if r.cfg.Cgroup != "" {
			cg, not, err := openComponentCgroup(r.cfg.Cgroup, c.name)
			if err != nil {
				r.setExited(c.name, err)
				return err
			}
			// The runnable returns once the process is gone: the
			// directory is needed only to start it.
			defer cg.Close()
			if not != "" {
				r.cgroupWarned.Do(func() {
					supervisor.Logger(ctx).Warn("the components' cgroups are not fully accounted", zap.String("because", not))
				})
			}
			cmd.CgroupFD = int(cg.Fd())
		}
		return process.Runnable(cmd, r.cfg.StopGrace, hooks)(ctx)
	}
	if !c.afterReady {
		return run
	}
	return func(ctx context.Context) error {
		if err := r.waitReady(ctx, c.name); err != nil {
			return err
		}
		return run(ctx)
	}
}

// waitReady waits until the apiserver answers /readyz ok, for component
// name. The controller-manager and the scheduler do nothing without it,
// and started beside it they took the CPU from its start under TCG: two
// large processes initialising on the same single vCPU, then retrying
// their leases through TLS handshakes it could not serve in time. A
// starting apiserver's post-start hooks give up after fixed times, and
// one of them (the repair of Service IPs and ports, whose first try
// failed on such a handshake) ended it (docs/benchmarks.md, issue 19).
// Once started they stay, through the apiserver's restarts, as in any
// cluster.
func (r *Runner) waitReady(ctx context.Context, name string) error {
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	if _, err := event.Get(ctx, r.Status(), event.Filter(func(s *Status) bool { return s != nil && s.Ready })); err != nil {
		return err
	}
	supervisor.Logger(ctx).Info("the apiserver is ready: starting " + name)
	return nil
}
