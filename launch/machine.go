package launch

import (
	"context"
	"crypto/ed25519"
	"net"
	"net/netip"
	"syscall"
	"time"
)

// A node runs on a machine: a polis-node process on the host
// (processMachine, process.go) or a qemu VM booting the node image
// (vmMachine, vmnode.go). A cluster chooses the kind once, in Launch, from
// Options.VM (its platform); from then on a node is started, stopped,
// recovered and restored through its machine without asking which kind it
// is.

// machine is what one node runs on. Its methods that take n are called
// with n.mu held, except restoreNext, which takes it itself; the
// machine's own state (the command line it boots with) is guarded by
// n.mu.
type machine interface {
	// boot starts a run of n and makes it n.run. The node was not
	// running.
	boot(n *Node) error
	// halt ends the run p of n, which the launcher has marked expected:
	// SIGKILL pulls the plug at once; SIGTERM asks the node to stop (a
	// VM's power button) and pulls the plug after timeout. It returns
	// once p has ended. n.mu is not held.
	halt(n *Node, p *process, sig syscall.Signal, timeout time.Duration) error
	// pid is the process ID of the run p, which has not ended: the node
	// process's, or qemu's.
	pid(p *process) int
	// setRecovery makes n's next boots recovery boots (on) or ordinary
	// ones (RecoverSingleMember).
	setRecovery(on bool)
	// recoveryRefused returns why the run p refused to recover, when the
	// node said so while still running (a VM's console; a process exits
	// instead, which poll reports).
	recoveryRefused(p *process) (string, bool)
	// restoreNext makes n's next boot restore the cluster from the backup
	// at path, decrypted with key (saved at keyPath); undo makes later
	// boots ordinary ones again and removes what it made.
	restoreNext(n *Node, path string, key ed25519.PrivateKey, keyPath string) (undo func(), err error)
}

// platform is the kind of machine every node of a cluster runs on,
// chosen once in Launch (newPlatform).
type platform interface {
	// checkAddresses refuses addresses that new nodes cannot have on
	// these machines.
	checkAddresses(addrs []netip.Addr) error
	// prepare makes what every machine needs before the first node is
	// made: the node binary, or the image and the network.
	prepare(ctx context.Context) error
	// newMachine makes the machine of n (whose Index, Address and Dir
	// are set) and returns it with the file its output goes to (Log).
	newMachine(n *Node) (machine, string)
	// kubernetesWorkers are those of nodes that Launch gives the
	// kubernetes-worker role (Options.Kubernetes).
	kubernetesWorkers(nodes []*Node) []*Node
	// apiserverReach is how the launcher asks an apiserver of these
	// machines: dial reaches a node's address (nil: the host's network
	// does), and wait bounds each Kubernetes step.
	apiserverReach() (dial func(ctx context.Context, network, address string) (net.Conn, error), wait time.Duration)
}

// newPlatform chooses the platform of c's nodes from its options.
func newPlatform(c *Cluster) platform {
	if c.opts.VM != nil {
		return &vmPlatform{c: c}
	}
	return &processPlatform{c: c}
}
