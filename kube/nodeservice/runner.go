package nodeservice

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/event/memory"
	"github.com/polis-os/polis/kube/process"
	"github.com/polis-os/polis/supervisor"
)

// DefaultStopGrace bounds a clean stop of the process.
const DefaultStopGrace = 10 * time.Second

// File is one generated file: its absolute path and contents, and whether
// it holds a secret (0600; others are 0644).
type File struct {
	Path   string
	Data   []byte
	Secret bool
}

// Spec is what a Runner runs.
type Spec struct {
	// Name names the service in the status value's name and in messages.
	Name string
	// Files are written at the start of each Run, before the command's
	// first start, and rewritten by Renew. A process restarted within a
	// run (it exited) finds them as last written: nothing else writes
	// them, so they need not be written again.
	Files []File
	// Command is the process.
	Command process.Command
	// StopGrace: DefaultStopGrace if 0.
	StopGrace time.Duration
	// Cgroup, if set, is the cgroup v2 directory the process runs in:
	// made at the start of a run, with its parent if missing, and removed
	// at its end. Its parent, which the node's services share, gets
	// CPUWeight when the cpu controller is enabled for it. Empty: the
	// process runs in the node agent's cgroup.
	Cgroup string
}

// WeightedMessage is logged when a run has placed its service in its
// cgroup and given the parent CPUWeight; a run without the weight logs
// why instead (once).
const WeightedMessage = "running in its cgroup, its parent weighted"

// UnweightedMessage is logged, once, when a run has placed its service in
// its cgroup but could not weight the parent; its "because" field says why.
const UnweightedMessage = "running in its cgroup without a CPU weight"

// StatusName is the name of the status value of the service name (event
// Info), by which the role server's graph knows it.
func StatusName(name string) string { return "kube." + name + ".status" }

// Status is what the service does. Values are immutable once published.
type Status struct {
	// Running is true while the process runs; PID is its pid then.
	Running bool
	PID     int
	// Starts counts the processes started since the Runner was made.
	Starts int
	// Note says how the process last ended while it does not run, or why
	// it could not start; empty while it runs.
	Note string
}

// Runner runs one node service; see the package doc.
type Runner struct {
	spec   Spec
	status memory.Value[*Status]

	// filesLock is held while the files are chosen and written (Run,
	// Renew), so that the files last written are the last chosen: without
	// it a Run that took the old files could write them over a Renew's
	// and start the process on them (no SIGTERM: it did not run yet). A
	// channel of one, not a sync.Mutex, so that a test (testing/synctest)
	// sees a Renew that waits for it as blocked.
	filesLock chan struct{}
	// chosen, if set, is called by Run with the files lock held, once the
	// files are chosen and before they are written: a test seam.
	chosen func()

	mu    sync.Mutex
	files []File
	cur   Status

	// noWeightLogged: why a run has no CPU weight is logged once, not at
	// every run.
	noWeightLogged sync.Once
}

// New checks spec and returns a Runner ready to Run.
func New(spec Spec) (*Runner, error) {
	if spec.Name == "" {
		return nil, errors.New("nodeservice: the spec has no name")
	}
	if !filepath.IsAbs(spec.Command.Path) {
		return nil, fmt.Errorf("nodeservice %s: command %q is not an absolute path", spec.Name, spec.Command.Path)
	}
	if err := checkFiles(spec.Files); err != nil {
		return nil, fmt.Errorf("nodeservice %s: %w", spec.Name, err)
	}
	// A cgroup and its parent, both below a mount.
	if c := spec.Cgroup; c != "" && (!filepath.IsAbs(c) || filepath.Clean(c) != c || strings.Count(c, "/") < 2) {
		return nil, fmt.Errorf("nodeservice %s: cgroup %q is not a clean absolute path with a parent", spec.Name, c)
	}
	if spec.StopGrace == 0 {
		spec.StopGrace = DefaultStopGrace
	}
	r := &Runner{spec: spec, files: spec.Files, filesLock: make(chan struct{}, 1)}
	r.status.Name = StatusName(spec.Name)
	r.cur.Note = "not started"
	r.publishLocked()
	return r, nil
}

func checkFiles(fs []File) error {
	for _, f := range fs {
		if !filepath.IsAbs(f.Path) {
			return fmt.Errorf("file %q is not an absolute path", f.Path)
		}
	}
	return nil
}

// Status is the service's status as a value.
func (r *Runner) Status() event.ValueWatch[*Status] { return &r.status }

// Run writes the files and runs the command until ctx ends, restarting
// it (with the supervisor's backoff) when it exits. It is a
// supervisor.Runnable.
func (r *Runner) Run(ctx context.Context) error {
	if err := r.writeFiles(); err != nil {
		r.update(func(s *Status) { s.Note = "failed, restarting: " + err.Error() })
		return err
	}
	cmd := r.spec.Command
	if r.spec.Cgroup != "" {
		cg, noWeight, err := openCgroup(r.spec.Cgroup)
		if err != nil {
			r.update(func(s *Status) { s.Note = "failed, restarting: " + err.Error() })
			return err
		}
		log := supervisor.Logger(ctx)
		// The process runnable starts processes into it until the run's
		// subtree has stopped.
		supervisor.Cleanup(ctx, func() { cg.close(log) })
		cmd.CgroupFD = int(cg.fd.Fd())
		if noWeight == "" {
			log.Info(WeightedMessage, zap.String("cgroup", cg.dir), zap.Int("parentCPUWeight", CPUWeight))
		} else {
			r.noWeightLogged.Do(func() {
				log.Warn(UnweightedMessage, zap.String("cgroup", cg.dir), zap.String("because", noWeight))
			})
		}
	}
	if err := supervisor.Run(ctx, "process", process.Runnable(cmd, r.spec.StopGrace, process.StatusHooks(r.update,
		func(s *Status, pid int) { s.Running, s.PID, s.Note = true, pid, ""; s.Starts++ },
		func(s *Status, how string) { s.Running, s.PID, s.Note = false, 0, "ended: "+how },
	))); err != nil {
		return err
	}
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	<-ctx.Done()
	return ctx.Err()
}

// Renew replaces the files (the same paths with new contents: fresh
// credentials) and stops the running process, which its runnable starts
// again to read them.
func (r *Runner) Renew(fs []File) error {
	if err := checkFiles(fs); err != nil {
		return fmt.Errorf("nodeservice %s: %w", r.spec.Name, err)
	}
	r.lockFiles()
	defer r.unlockFiles()
	r.mu.Lock()
	r.files = fs
	pid := r.cur.PID
	r.mu.Unlock()
	if err := write(fs); err != nil {
		return fmt.Errorf("nodeservice %s: %w", r.spec.Name, err)
	}
	if pid != 0 {
		_ = syscall.Kill(-pid, syscall.SIGTERM)
	}
	return nil
}

// writeFiles writes the files the runner holds now, under the files lock.
func (r *Runner) writeFiles() error {
	r.lockFiles()
	defer r.unlockFiles()
	r.mu.Lock()
	fs := r.files
	r.mu.Unlock()
	if r.chosen != nil {
		r.chosen()
	}
	if err := write(fs); err != nil {
		return fmt.Errorf("nodeservice %s: %w", r.spec.Name, err)
	}
	return nil
}

func (r *Runner) lockFiles()   { r.filesLock <- struct{}{} }
func (r *Runner) unlockFiles() { <-r.filesLock }

func (r *Runner) update(f func(*Status)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(&r.cur)
	r.publishLocked()
}

func (r *Runner) publishLocked() {
	s := r.cur
	r.status.Set(&s)
}

// write writes fs, each to a temporary name first and renamed, so that no
// process reads half a file; directories are made 0700.
func write(fs []File) error {
	for _, f := range fs {
		if err := os.MkdirAll(filepath.Dir(f.Path), 0o700); err != nil {
			return fmt.Errorf("creating %s: %w", filepath.Dir(f.Path), err)
		}
		mode := os.FileMode(0o644)
		if f.Secret {
			mode = 0o600
		}
		tmp := f.Path + ".tmp"
		if err := os.WriteFile(tmp, f.Data, mode); err != nil {
			return fmt.Errorf("writing %s: %w", f.Path, err)
		}
		if err := os.Chmod(tmp, mode); err != nil {
			return fmt.Errorf("writing %s: %w", f.Path, err)
		}
		if err := os.Rename(tmp, f.Path); err != nil {
			return fmt.Errorf("writing %s: %w", f.Path, err)
		}
	}
	return nil
}
