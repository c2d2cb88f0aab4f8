// Package process runs one program as a supervised child process of the
// node agent: the Kubernetes components (kube/controlplane), containerd
// and kubelet (kube/kubelet).
//
// # Model
//
// Start starts the program in a process group of its own, killed by the
// kernel if the node agent dies (Pdeathsig), and logs every line it writes
// (stdout and stderr, in order) on the logger it is given, so the node's
// log names the program; klog's severity letter picks the level. Stop ends
// the whole group: SIGTERM, then SIGKILL after a grace period, and returns
// only once the process is gone.
//
// When the process exits, whatever is left in its group is killed.
//
// Runnable wraps that as a supervisor.Runnable: it fails when the process
// exits (so the supervisor restarts it, with backoff) and stops it when its
// context ends, reporting starts and exits through hooks for a status
// (StatusHooks: the hooks of a runner that keeps one under its lock,
// ExitString: how a process ended, in a status note's words).
//
// # What it does not do
//
// It does not follow processes that leave their process group (containerd
// starts its shims in sessions of their own): whoever starts such a
// program ends those itself (kube/kubelet does, through cgroups).
package process

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/polis-os/polis/supervisor"
)

// logDrainTimeout bounds reading a process' last lines after it exited.
const logDrainTimeout = time.Second

// Command is a program to run.
type Command struct {
	// Path is the executable; Args its arguments (without argv[0]).
	Path string
	Args []string
	// Dir is its working directory; Env its environment (nil: the node
	// agent's).
	Dir string
	Env []string
	// CgroupFD, if positive, is an open cgroup v2 directory the process
	// starts in (clone3's CLONE_INTO_CGROUP).
	CgroupFD int
}

// Process is a started Command.
type Process struct {
	pid    int
	log    *zap.Logger
	exited chan struct{}
	err    error // how it exited; set before exited is closed
}

// Start starts c and logs its output on log; see the package doc.
func Start(log *zap.Logger, c Command) (*Process, error) {
	cmd := exec.Command(c.Path, c.Args...)
	cmd.Dir = c.Dir
	cmd.Env = c.Env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if c.CgroupFD > 0 {
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = c.CgroupFD
	}
	// A pipe of our own rather than cmd's: cmd.Wait would close it, and a
	// child of the process that keeps it open would otherwise delay
	// noticing the exit until that child ends.
	out, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = w, w // one pipe: lines stay in order
	err = cmd.Start()
	w.Close()
	if err != nil {
		out.Close()
		return nil, fmt.Errorf("starting %s: %w", c.Path, err)
	}
	p := &Process{pid: cmd.Process.Pid, log: log, exited: make(chan struct{})}
	log.Info("started", zap.Int("pid", p.pid))
	logged := make(chan struct{})
	go func() {
		LogLines(log, out)
		close(logged)
	}()
	go func() {
		p.err = cmd.Wait()
		// What is left of its group (children that did not exit with it)
		// goes too: nothing outlives the process it came from.
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
		// Its last lines, unless something outside the group holds the
		// pipe open.
		select {
		case <-logged:
		case <-time.After(logDrainTimeout):
		}
		out.Close()
		<-logged
		close(p.exited)
	}()
	return p, nil
}

// PID is the process' pid.
func (p *Process) PID() int { return p.pid }

// Exited is closed once the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Err is how the process exited (nil for status 0); valid once Exited is
// closed.
func (p *Process) Err() error { return p.err }

// Stop ends the process' group: SIGTERM, SIGKILL after grace, and whatever
// is left in the group SIGKILL once the process is gone. It returns how the
// process exited.
func (p *Process) Stop(grace time.Duration) error {
	_ = syscall.Kill(-p.pid, syscall.SIGTERM)
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-p.exited:
	case <-timer.C:
		p.log.Warn("did not stop in time; killing", zap.Duration("grace", grace))
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
		<-p.exited
	}
	_ = syscall.Kill(-p.pid, syscall.SIGKILL)
	p.log.Info("stopped", zap.Int("pid", p.pid))
	return p.err
}

// Hooks tell a status keeper about a Runnable's processes. Either may be
// nil.
type Hooks struct {
	// Started is called with the pid of each process started.
	Started func(pid int)
	// Exited is called when that process has ended, with how (nil for
	// exit status 0).
	Exited func(err error)
}

// ExitString says how a process ended, as Hooks.Exited and Process.Err
// tell it, in the words of a status note: "exit status 0" for nil.
func ExitString(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// StatusHooks are Hooks that keep a status of type S through update,
// which applies a change to the status under its keeper's lock and
// publishes it: started changes it at each start, with the process's pid;
// ended at each end, with how it ended in ExitString's words.
func StatusHooks[S any](update func(func(*S)), started func(s *S, pid int), ended func(s *S, how string)) Hooks {
	return Hooks{
		Started: func(pid int) { update(func(s *S) { started(s, pid) }) },
		Exited: func(err error) {
			how := ExitString(err)
			update(func(s *S) { ended(s, how) })
		},
	}
}

// Runnable runs c until its context ends, failing when the process exits
// (the supervisor restarts it); StopGrace bounds a clean stop.
func Runnable(c Command, stopGrace time.Duration, h Hooks) supervisor.Runnable {
	return func(ctx context.Context) error {
		p, err := Start(supervisor.Logger(ctx), c)
		if err != nil {
			return err
		}
		if h.Started != nil {
			h.Started(p.PID())
		}
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		select {
		case <-p.Exited():
			if h.Exited != nil {
				h.Exited(p.Err())
			}
			err := p.Err()
			if err == nil {
				err = errors.New("exited")
			}
			return fmt.Errorf("pid %d ended: %w", p.PID(), err)
		case <-ctx.Done():
		}
		err = p.Stop(stopGrace)
		if h.Exited != nil {
			h.Exited(err)
		}
		return ctx.Err()
	}
}

// LogLines logs every line read from out on log until out ends. klog lines
// start with their severity letter (I, W, E, F); the level follows it.
func LogLines(log *zap.Logger, out io.Reader) {
	// A child's error line is its own report, not the agent's: no stack
	// trace of the goroutine that copies it (the node's logger adds one to
	// every error, and a kubelet waiting for its apiserver logs several
	// errors a second, each a trace captured and printed for nothing).
	log = log.WithOptions(zap.AddStacktrace(zapcore.FatalLevel))
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
