package launch

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/node/pid1"
)

// A cluster that lost the quorum of its consensus members for good is
// brought back on a survivor (RecoverSingleMember), as an operator would:
// one start of that node in recovery mode, the same for processes and
// VMs. The cluster then grows again with new nodes (AddNodes,
// addnodes.go).

// recoverFlag is the agent's flag for a recovery start: polis-node
// --recover-single-member, polis.recover-single-member=true on a VM's
// kernel command line (pid1.AgentFlags).
const recoverFlag = "recover-single-member"

// recoveryClockSkew is how far a VM's clock, which stamps the recovery
// (ClusterRecovery.recovered_at), may trail the launcher's: a VM reads
// the host's clock at boot, to the second.
const recoveryClockSkew = 5 * time.Second

// RecoverSingleMember brings back a cluster that lost the quorum of its
// consensus members for good on n, a surviving member: n is stopped if it
// runs, then started once in recovery mode (a process with polis-node
// --recover-single-member; a VM booted with polis.recover-single-member=true
// on its kernel command line, as a one-time bootloader entry gives it),
// and RecoverSingleMember returns once n's curator serves the recovered
// cluster: cluster info shows the recovery on n, and n is UP, healthy and
// runs a curator. polisctl's configuration then lists the recovered
// cluster's curators. Later starts of n are ordinary ones.
//
// The lost members must be gone for good: while another member answers
// on its peer address, the recovery is refused and RecoverSingleMember
// returns the node's reason. A process has then exited, as polis-node
// does; a VM, which cannot exit, starts as usual and rejoins the cluster
// whose quorum answers.
func (c *Cluster) RecoverSingleMember(ctx context.Context, n *Node) error {
	if n.ID() == "" {
		return fmt.Errorf("launch: %v never joined the cluster: there is no consensus data of its to recover on", n)
	}
	since := time.Now().Add(-recoveryClockSkew)
	if err := n.Stop(c.opts.StopTimeout); err != nil {
		// A member that lost its quorum may not stop cleanly (its etcd
		// waits for peers that are gone): pulled the plug, as an
		// operator would, it is stopped all the same.
		if n.Running() {
			return fmt.Errorf("launch: %w", err)
		}
		c.progress("%v: %v; stopped it the hard way", n, err)
	}
	n.setRecovery(true)
	// Until the recovery is done: a VM that reboots meanwhile boots in
	// recovery mode again (a member already alone starts as usual).
	defer n.setRecovery(false)
	c.progress("%v: recovering the cluster on its consensus data", n)
	if err := c.StartNode(n); err != nil {
		return err
	}
	var lost []string
	err := c.poll(ctx, n.String()+": the recovered cluster's curator serving", func(ctx context.Context) (bool, error) {
		if why, ok := n.recoveryRefused(); ok {
			return false, fmt.Errorf("launch: %v refused the recovery: %s", n, why)
		}
		r, ok := c.recoveredOn(ctx, n, since)
		if ok {
			lost = r.GetLostNodeIds()
		}
		return ok, nil
	})
	if err != nil {
		return err
	}
	c.progress("%v: the cluster recovered on its consensus data, its curator serving; lost consensus members dropped: %s", n, strings.Join(lost, ", "))
	return c.refreshCurators(ctx)
}

// setRecovery makes n's next starts recovery starts (on) or ordinary
// ones.
func (n *Node) setRecovery(on bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.m.setRecovery(on)
}

// recoveryRefused returns why n's current run refused to recover, if it
// said so (machine.recoveryRefused).
func (n *Node) recoveryRefused() (string, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.run == nil {
		return "", false
	}
	return n.m.recoveryRefused(n.run)
}

func (m *processMachine) setRecovery(on bool) {
	m.args = slices.DeleteFunc(slices.Clone(m.args), func(a string) bool { return a == "--"+recoverFlag })
	if on {
		m.args = append(m.args, "--"+recoverFlag)
	}
}

// recoveryRefused: a process that refuses to recover exits, which poll
// reports with the end of its log.
func (m *processMachine) recoveryRefused(*process) (string, bool) { return "", false }

func (m *vmMachine) setRecovery(on bool) {
	m.cfg.AgentFlags = slices.DeleteFunc(slices.Clone(m.cfg.AgentFlags), func(f string) bool { return strings.HasPrefix(f, recoverFlag+"=") })
	if on {
		m.cfg.AgentFlags = append(m.cfg.AgentFlags, recoverFlag+"=true")
	}
}

// recoveryRefused returns the console line of the VM saying that this
// boot's recovery was refused, and why: the VM cannot exit, and starts as
// usual.
func (m *vmMachine) recoveryRefused(p *process) (string, bool) {
	l, ok := p.qemu.LastLine(pid1.RecoveryRefusedMessage)
	if !ok {
		return "", false
	}
	_, why, _ := strings.Cut(l, pid1.RecoveryRefusedMessage)
	return strings.TrimSpace(why), true
}

// recoveredOn reports whether the cluster was recovered on n's data
// since then, and n is UP, healthy and runs a curator; it returns the
// recovery.
func (c *Cluster) recoveredOn(ctx context.Context, n *Node, since time.Time) (*cpb.ClusterRecovery, bool) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	info, err := cpb.NewManagementServiceClient(c.Conn()).GetClusterInfo(cctx, &cpb.GetClusterInfoRequest{})
	if err != nil {
		return nil, false
	}
	r := info.GetLastRecovery()
	if r.GetNodeId() != n.ID() || r.GetRecoveredAt().AsTime().Before(since) {
		return nil, false
	}
	rec, err := c.node(ctx, n.ID())
	if err != nil || rec == nil || !healthyUp(rec) || rec.Status.GetRunningCurator() == nil {
		return nil, false
	}
	return r, true
}
