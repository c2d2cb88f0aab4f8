package launch

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
)

// Cluster is a launched cluster. Close it to stop its nodes.
type Cluster struct {
	// BaseDir and ConfigDir are the directories of Options, as used.
	BaseDir, ConfigDir string
	// Nodes are the cluster's nodes in order; Nodes[0] bootstrapped it.
	Nodes []*Node

	opts      Options
	removeDir bool
	progMu    sync.Mutex
	closeOnce sync.Once
	closeErr  error
	connMu    sync.Mutex
	conn      *grpc.ClientConn
	ownerKey  ed25519.PrivateKey
	// platform is the kind of machine the nodes run on (machine.go).
	platform platform
	vmnet    *vmNetwork
	registry *imageRegistry
}

// Launch starts a cluster and returns once every node is UP and healthy
// (and, with ConsensusMembers, runs a curator). It reports each step to
// Options.Progress. On error, and when ctx ends first, it stops whatever it
// started before returning.
func Launch(ctx context.Context, opts Options) (_ *Cluster, err error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	if err := refuseKeptDir(opts.BaseDir); err != nil {
		return nil, err
	}
	if err := opts.checkRestore(); err != nil {
		return nil, err
	}
	c := &Cluster{opts: opts, BaseDir: opts.BaseDir, ConfigDir: opts.ConfigDir}
	c.platform = newPlatform(c)
	if err := c.platform.checkAddresses(opts.Addresses); err != nil {
		return nil, err
	}
	if c.BaseDir == "" {
		if c.BaseDir, err = os.MkdirTemp("", "polis-launch-"); err != nil {
			return nil, fmt.Errorf("launch: %w", err)
		}
	} else if err := os.MkdirAll(c.BaseDir, 0o755); err != nil {
		return nil, fmt.Errorf("launch: %w", err)
	}
	c.removeDir = !opts.Keep
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	if c.BaseDir, err = filepath.Abs(c.BaseDir); err != nil {
		return nil, err
	}
	if c.ConfigDir == "" {
		c.ConfigDir = filepath.Join(c.BaseDir, "polisctl")
	}
	if _, err := os.Stat(filepath.Join(c.ConfigDir, "ca.der")); err == nil && opts.RestoreBackup == "" {
		return nil, fmt.Errorf("launch: %s already holds the credentials of a cluster; choose another polisctl configuration directory or remove that one", c.ConfigDir)
	}
	c.progress("base directory %s", c.BaseDir)

	if err := c.platform.prepare(ctx); err != nil {
		return nil, err
	}
	for i, a := range opts.Addresses {
		n := &Node{Index: i + 1, Address: a, Dir: filepath.Join(c.BaseDir, "node"+strconv.Itoa(i+1)), report: c.progress}
		if err := os.MkdirAll(n.Dir, 0o700); err != nil {
			return nil, fmt.Errorf("launch: %w", err)
		}
		n.m, n.Log = c.platform.newMachine(n)
		c.Nodes = append(c.Nodes, n)
	}
	if err := c.form(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// progress reports one step.
func (c *Cluster) progress(format string, args ...any) {
	c.progMu.Lock()
	defer c.progMu.Unlock()
	fmt.Fprintf(c.opts.Progress, format+"\n", args...)
}

// StartNode starts a node's process (again) and reports it.
func (c *Cluster) StartNode(n *Node) error {
	if err := n.Start(); err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	c.progress("%v: started (pid %d, log %s)", n, n.PID(), n.Log)
	return nil
}

// poll calls cond every 100ms until it returns true or an error, the step's
// timeout passes, ctx ends, or a node process dies (which no step survives;
// the error then carries the end of that node's log).
func (c *Cluster) poll(ctx context.Context, what string, cond func(context.Context) (bool, error)) error {
	return c.pollWithin(ctx, c.opts.StepTimeout, what, cond)
}

// pollWithin is poll with its own timeout, for the steps that take longer
// than one (Kubernetes in VMs).
func (c *Cluster) pollWithin(ctx context.Context, timeout time.Duration, what string, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	var last error // the condition's latest reason for not holding
	for {
		ok, err := cond(ctx)
		if ny := (notYet{}); errors.As(err, &ny) {
			ok, err, last = false, nil, ny.err
		}
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		for _, n := range c.Nodes {
			if err := n.exitError(); err != nil {
				return fmt.Errorf("launch: waiting for %s: %w", what, err)
			}
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("launch: waiting for %s: %w (the last attempt: %v)", what, context.Cause(ctx), last)
			}
			return fmt.Errorf("launch: waiting for %s: %w", what, context.Cause(ctx))
		case <-t.C:
		}
	}
}

// notYet is a poll condition's reason for not holding yet: polling goes
// on, and the reason is reported if time runs out.
type notYet struct{ err error }

func (e notYet) Error() string { return e.err.Error() }
func (e notYet) Unwrap() error { return e.err }

// Close stops every node (SIGTERM, then SIGKILL after StopTimeout), closes
// the owner's connection and removes BaseDir unless Options.Keep. It is
// safe to call more than once.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() {
		if conn := c.Conn(); conn != nil {
			conn.Close()
		}
		var wg sync.WaitGroup
		errs := make([]error, len(c.Nodes))
		for i, n := range c.Nodes {
			wg.Go(func() { errs[i] = n.Stop(c.opts.StopTimeout) })
		}
		wg.Wait()
		c.closeErr = errors.Join(append(errs, c.closeVMNetwork())...)
		if c.removeDir && c.BaseDir != "" {
			if err := os.RemoveAll(c.BaseDir); err != nil {
				c.closeErr = errors.Join(c.closeErr, err)
			}
		}
	})
	return c.closeErr
}
