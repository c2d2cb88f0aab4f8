package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/polis-os/polis/launch/vm"
)

// LauncherPIDEnv is the environment variable that gives a node process
// the launcher's PID: polis-node then has the kernel kill it when the
// launcher dies, again after every exec of its own (a reboot).
const LauncherPIDEnv = "POLIS_LAUNCHER_PID"

// Node is one node of a launched cluster: a node-agent process, or a VM
// (its machine, machine.go).
type Node struct {
	// Index is the node's number, from 1; node 1 bootstrapped the cluster.
	Index int
	// Address is the node's loopback address.
	Address netip.Addr
	// Dir holds the node's storage (Dir/storage) and its parameters file.
	Dir string
	// Log is the file the node's output goes to, kept across restarts.
	Log string

	// m is the node's machine, made with the node and never replaced;
	// its own state is guarded by mu.
	m      machine
	report func(format string, args ...any)

	mu sync.Mutex
	// id is the node's ID, once the curator has listed it.
	id string
	// run is the current run of its machine; nil before the first
	// start.
	run *process
}

// process is one run of a node's machine: of its process, or of its VM.
type process struct {
	// cmd is the node's process (processMachine); nil for a VM.
	cmd *exec.Cmd
	// exited is closed once the process has been waited for; err is then
	// its exit status.
	exited chan struct{}
	err    error
	// expected is set before the launcher itself ends the process, so that
	// the exit is not reported as a failure.
	expected bool
	// qemu is the VM (vmMachine); nil for a process.
	qemu *vm.Machine
}

// ID returns the node's ID, or "" while the curator has not listed it yet.
func (n *Node) ID() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.id
}

func (n *Node) setID(id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.id = id
}

func (n *Node) String() string { return fmt.Sprintf("node %d (%v)", n.Index, n.Address) }

// Start starts the node's process, which must not be running. A node that
// was started before comes back from its storage alone, as after a reboot.
func (n *Node) Start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.run != nil && !n.run.done() {
		return fmt.Errorf("%v is running already", n)
	}
	return n.m.boot(n)
}

// processPlatform runs every node as a polis-node process on the host,
// on its own loopback address.
type processPlatform struct {
	c *Cluster
	// binary is the polis-node executable, found or built by prepare.
	binary string
}

// checkAddresses refuses addresses whose ports are taken.
func (p *processPlatform) checkAddresses(addrs []netip.Addr) error {
	return checkPortsFree(addrs, &p.c.opts)
}

// prepare finds or builds polis-node and, for Kubernetes, the bundle.
func (p *processPlatform) prepare(ctx context.Context) error {
	c := p.c
	bin, err := c.nodeBinary(ctx)
	if err != nil {
		return err
	}
	p.binary = bin
	if c.opts.Kubernetes {
		if c.opts.KubernetesBundle, err = c.kubernetesBundle(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (p *processPlatform) newMachine(n *Node) (machine, string) {
	return &processMachine{binary: p.binary, args: nodeArgs(n, &p.c.opts)}, filepath.Join(p.c.BaseDir, fmt.Sprintf("node%d.log", n.Index))
}

// kubernetesWorkers is none: a node process has no container runtime of
// its own, so its nodes run no Pods.
func (p *processPlatform) kubernetesWorkers([]*Node) []*Node { return nil }

// apiserverReach: the nodes' loopback addresses are the host's, and a
// step may take Options.StepTimeout.
func (p *processPlatform) apiserverReach() (func(ctx context.Context, network, address string) (net.Conn, error), time.Duration) {
	return nil, p.c.opts.StepTimeout
}

// processMachine is a node that runs as a polis-node process.
type processMachine struct {
	binary string
	args   []string
}

func (m *processMachine) boot(n *Node) error {
	log, err := os.OpenFile(n.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("%v: opening its log: %w", n, err)
	}
	// The child gets its own copy of the descriptor: ours can be closed as
	// soon as it has started.
	defer log.Close()
	cmd := exec.Command(m.binary, m.args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = sysProcAttr()
	// The node arms the parent-death signal again after each exec of
	// its own (a reboot), which would otherwise lose it.
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", LauncherPIDEnv, os.Getpid()))
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%v: starting %s: %w", n, m.binary, err)
	}
	p := &process{cmd: cmd, exited: make(chan struct{})}
	n.run = p
	go func() {
		err := cmd.Wait()
		n.mu.Lock()
		p.err = err
		expected := p.expected
		n.mu.Unlock()
		close(p.exited)
		if !expected {
			n.report("%s", exitReport(n, err))
		}
	}()
	return nil
}

// exitReport says how a node's process that the launcher did not stop
// ended: with status 0 it stopped by itself, as after polisctl node
// poweroff, which is no failure.
func exitReport(n *Node, err error) string {
	if err == nil {
		return fmt.Sprintf("%v: stopped by itself (exit status 0, as after polisctl node poweroff); its log: %s", n, n.Log)
	}
	return fmt.Sprintf("%v: exited unexpectedly (%v); its log: %s", n, err, n.Log)
}

func (p *process) done() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// PID returns the process ID of the node's current process, or 0 when it
// is not running.
func (n *Node) PID() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.run == nil || n.run.done() {
		return 0
	}
	return n.m.pid(n.run)
}

func (m *processMachine) pid(p *process) int { return p.cmd.Process.Pid }

// Running reports whether the node's process is running.
func (n *Node) Running() bool { return n.PID() != 0 }

// exitError returns an error describing how the node's process ended, or
// nil while it runs (or was ended by the launcher).
func (n *Node) exitError() error {
	n.mu.Lock()
	p := n.run
	n.mu.Unlock()
	if p == nil || !p.done() || p.expected {
		return nil
	}
	return fmt.Errorf("%v exited: %v; the end of its log (%s):\n%s", n, p.err, n.Log, tail(n.Log, 20))
}

// Kill ends the node's process with SIGKILL, as a power cut would, and
// waits until it has exited.
func (n *Node) Kill() error { return n.stop(syscall.SIGKILL, 0) }

// Stop asks the node's process to stop (SIGTERM) and waits for it; after
// timeout it is killed.
func (n *Node) Stop(timeout time.Duration) error { return n.stop(syscall.SIGTERM, timeout) }

func (n *Node) stop(sig syscall.Signal, timeout time.Duration) error {
	n.mu.Lock()
	p := n.run
	if p == nil || p.done() {
		n.mu.Unlock()
		return nil
	}
	p.expected = true
	n.mu.Unlock()
	return n.m.halt(n, p, sig, timeout)
}

func (m *processMachine) halt(n *Node, p *process, sig syscall.Signal, timeout time.Duration) error {
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("%v: sending %v: %w", n, sig, err)
	}
	if sig == syscall.SIGKILL {
		<-p.exited
		return nil
	}
	select {
	case <-p.exited:
		return nil
	case <-time.After(timeout):
	}
	n.report("%v: did not stop within %v; killing it", n, timeout)
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("%v: killing it: %w", n, err)
	}
	<-p.exited
	return fmt.Errorf("%v did not stop within %v after SIGTERM and was killed", n, timeout)
}

// tail returns the last lines of a file, for error messages.
func tail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	b = bytes.TrimRight(b, "\n")
	for i, cut := len(b)-1, 0; i >= 0; i-- {
		if b[i] == '\n' {
			if cut++; cut == lines {
				return string(b[i+1:])
			}
		}
	}
	return string(b)
}

// nodeArgs is polis-node's command line for a node.
func nodeArgs(n *Node, o *Options) []string {
	args := []string{
		"--storage", filepath.Join(n.Dir, "storage"),
		"--address", n.Address.String(),
		// Ignored once the node has joined, so restarts can pass it too.
		"--parameters", filepath.Join(n.Dir, "parameters.pb"),
		"--log-format", o.LogFormat,
	}
	if o.LeaseTTL > 0 {
		args = append(args, "--lease-ttl", o.LeaseTTL.String())
	}
	if o.HeartbeatInterval > 0 {
		args = append(args, "--heartbeat-interval", o.HeartbeatInterval.String())
	}
	if o.ConsensusHeartbeat > 0 {
		args = append(args, "--consensus-heartbeat", o.ConsensusHeartbeat.String())
	}
	if o.ConsensusElectionTimeout > 0 {
		args = append(args, "--consensus-election-timeout", o.ConsensusElectionTimeout.String())
	}
	if o.Kubernetes {
		args = append(args, "--kubernetes-bundle", o.KubernetesBundle)
	}
	return append(args, "--consensus-port", strconv.Itoa(int(o.ConsensusPort)), "--curator-port", strconv.Itoa(int(o.CuratorPort)))
}
