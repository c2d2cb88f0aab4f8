package controlplane

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/polis-os/polis/supervisor"
)

// component is one control-plane process: its subcommand of the bundle and
// its flags.
type component struct {
	name string
	args []string
}

// run is the runnable of one component: it starts the process, logs its
// output, and returns when the process exits (a failure, so the supervisor
// restarts it) or when ctx ends (after stopping it).
func (r *Runner) runComponent(c component) supervisor.Runnable {
	return func(ctx context.Context) error {
		log := supervisor.Logger(ctx)
		cmd := exec.Command(r.cfg.Bundle, append([]string{c.name}, c.args...)...)
		cmd.Dir = r.cfg.Dir
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		cmd.Stderr = cmd.Stdout // one pipe: lines stay in order
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("starting %s: %w", c.name, err)
		}
		pid := cmd.Process.Pid
		log.Info("started", zap.Int("pid", pid))
		r.setRunning(c.name, pid)

		var logged sync.WaitGroup
		logged.Go(func() { logLines(log, out) })
		exited := make(chan error, 1)
		go func() {
			logged.Wait() // Wait closes the pipe: read it to the end first
			exited <- cmd.Wait()
		}()
		supervisor.Signal(ctx, supervisor.SignalHealthy)

		select {
		case err := <-exited:
			r.setExited(c.name, err)
			if err == nil {
				err = errors.New("exited")
			}
			return fmt.Errorf("%s (pid %d) ended: %w", c.name, pid, err)
		case <-ctx.Done():
		}
		// Stop the whole process group: a component's own children go too.
		_ = syscall.Kill(-pid, syscall.SIGTERM)
		timer := time.NewTimer(r.cfg.StopGrace)
		defer timer.Stop()
		var exitErr error
		select {
		case exitErr = <-exited:
		case <-timer.C:
			log.Warn("did not stop in time; killing", zap.Duration("grace", r.cfg.StopGrace))
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			exitErr = <-exited
		}
		// Whatever is left in the group (nothing, normally) is killed too.
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		r.setExited(c.name, exitErr)
		log.Info("stopped", zap.Int("pid", pid))
		return ctx.Err()
	}
}

// logLines logs every line of a component's output. klog lines start with
// their severity letter (I, W, E, F); the level follows it.
func logLines(log *zap.Logger, out io.Reader) {
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case len(line) > 0 && (line[0] == 'E' || line[0] == 'F'):
			log.Error(line)
		case len(line) > 0 && line[0] == 'W':
			log.Warn(line)
		default:
			log.Info(line)
		}
	}
	// A line longer than the buffer ends the scan; drain the rest so the
	// process never blocks on a full pipe.
	_, _ = io.Copy(io.Discard, out)
}
