// Command polis-launch starts a Polis cluster of node-agent processes on
// loopback addresses (or, with --vm, of qemu VMs booting the node image on
// a virtual switch), for development: the first node bootstraps the
// cluster, the others register and are approved, and (unless
// --consensus-members=false) every node becomes a consensus member. It
// prints each step, then how to use polisctl as the cluster's owner, and
// runs until Ctrl-C, when it stops every node and removes what it created
// (--keep keeps it).
//
//	go run ./cmd/polis-launch [--vm | --kubernetes] [--nodes 3] [--dir DIR --keep] [--config DIR]
//	go run ./cmd/polis-launch [--vm] --restore-backup FILE --config DIR [--dir DIR --keep]
//
// The work is done by package launch; this is its command line.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"strconv"

	"github.com/polis-os/polis/curator"
	"github.com/polis-os/polis/internal/cmdmain"
	"github.com/polis-os/polis/launch"
	"github.com/polis-os/polis/launch/vm"
)

func main() { cmdmain.Run("polis-launch", run) }

func run(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := cmdmain.FlagSet("polis-launch", errOut)
	var (
		o     launch.Options
		first = launch.DefaultFirstAddress
	)
	fs.IntVar(&o.Nodes, "nodes", 3, "how many nodes to start")
	fs.BoolVar(&o.ConsensusMembers, "consensus-members", true, "make every node a consensus member (false: only the first node runs the control plane)")
	fs.StringVar(&o.BaseDir, "dir", "", "the directory for the nodes' storage and logs (default: a new temporary directory)")
	fs.BoolVar(&o.Keep, "keep", false, "keep the directory when the cluster stops")
	fs.StringVar(&o.ConfigDir, "config", "", "the polisctl configuration directory for the owner's credentials (default: DIR/polisctl)")
	fs.TextVar(&first, "first-address", launch.DefaultFirstAddress, "the first node's address; the others follow it")
	fs.StringVar(&o.NodeBinary, "node-binary", "", "the polis-node executable (default: one next to this program, else built with go build)")
	fs.DurationVar(&o.LeaseTTL, "lease-ttl", 0, "the curator leader's lease (0: the curator's default)")
	fs.DurationVar(&o.HeartbeatInterval, "heartbeat-interval", 0, "the nodes' heartbeat interval (0: the curator's default)")
	fs.DurationVar(&o.ConsensusHeartbeat, "consensus-heartbeat", 0, "every consensus member's raft heartbeat (0: etcd's 100ms; with --vm under TCG 500ms)")
	fs.DurationVar(&o.ConsensusElectionTimeout, "consensus-election-timeout", 0, "every consensus member's raft election timeout, at least five heartbeats (0: etcd's 1s; with --vm under TCG 5s)")
	fs.StringVar(&o.LogFormat, "log-format", "console", "the nodes' log format: console or json")
	accel := fs.String("accel", "tcg", "with --vm: qemu's accelerator: tcg, kvm, or auto (KVM if a probe VM boots under it within seconds)")
	fs.BoolVar(&o.Kubernetes, "kubernetes", false, "run Kubernetes: give every node the Kubernetes bundle (built on first use: about 7 minutes on two idle cores, seconds afterwards) and the first node the kubernetes-controller role")
	fs.StringVar(&o.KubernetesBundle, "kubernetes-bundle", "", "with --kubernetes: the polis-kube binary (default: one next to this program, else built from the repository's kubernetes/ module)")
	systemDir := fs.String("system-dir", "", "with --vm --kubernetes: the node's system tree for the system disk (default: built by launch/systembuild on first use, about 9 minutes on two idle cores with the bundle, seconds afterwards)")
	fs.Func("image", "with --vm --kubernetes: REF=PATH, an image (PATH an OCI image layout directory, an OCI archive or a docker archive) the launcher serves from its own registry; Pods name it as REF (e.g. demo); repeatable", func(v string) error {
		im, err := launch.ParseImage(v)
		if err != nil {
			return err
		}
		o.Images = append(o.Images, im)
		return nil
	})
	fs.Func("pod-range", "the cluster's pod range, out of which each Kubernetes worker and controller node gets its own (default: "+curator.DefaultPodRange.String()+"); it must not overlap the nodes' network; not with --restore-backup, whose cluster keeps the backup's", func(v string) error {
		p, err := netip.ParsePrefix(v)
		if err != nil {
			return fmt.Errorf("want a prefix such as %s: %w", curator.DefaultPodRange, err)
		}
		o.PodRange = p
		return nil
	})
	fs.IntVar(&o.PodNodePrefixLength, "pod-node-prefix", 0, "the prefix length of each Kubernetes node's pod range (0: "+strconv.Itoa(curator.DefaultNodePodPrefixLength)+"); not with --restore-backup, whose cluster keeps the backup's")
	fs.StringVar(&o.RestoreBackup, "restore-backup", "", "restore a cluster from this backup (polisctl cluster backup) instead of bootstrapping one: the first node becomes its single consensus member, the others join it, and the cluster keeps the backup's pod network; --config must be the polisctl configuration of the cluster it was taken from (its owner key decrypts the backup; with --vm, the launcher decrypts it and gives the first VM the snapshot alone)")
	cpus := fs.Int("cpus", 0, "with --vm: each VM's vCPUs, 1 to 64 (0: 1, or 2 with --kubernetes); under TCG each is a host thread")
	capture := fs.String("capture", "", "with --vm: write every frame that crosses the cluster switch to this file, as pcap (for tcpdump or Wireshark; mode 0600, since it holds whatever the nodes send in clear)")
	vmMode := fs.Bool("vm", false, "boot every node as a qemu VM from the node image (built on first use) instead of a process; polisctl reaches the VMs through a proxy saved in its configuration")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.Nodes < 1 {
		return fmt.Errorf("--nodes %d: want at least one", o.Nodes)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *vmMode {
		// Refused rather than ignored: an operator who asked for an
		// address range would otherwise look for the nodes there.
		if set["first-address"] {
			return errors.New("--first-address is for process nodes: with --vm the VMs take their addresses from their own network (polis-launch prints them, and polisctl reaches them through the launcher's proxy)")
		}
		if *cpus < 0 || *cpus > vm.MaxCPUs {
			return fmt.Errorf("--cpus %d: want 1 to %d (or 0 for the default)", *cpus, vm.MaxCPUs)
		}
		o.VM = &launch.VMOptions{Accel: *accel, SystemDir: *systemDir, CaptureFile: *capture, CPUs: *cpus} // addresses from its network
	} else {
		for _, f := range []string{"accel", "capture", "cpus"} {
			if set[f] {
				return fmt.Errorf("--%s is for --vm only", f)
			}
		}
		for a, i := first, 0; i < o.Nodes; a, i = a.Next(), i+1 {
			o.Addresses = append(o.Addresses, a)
		}
	}
	o.Progress = out

	c, err := launch.Launch(ctx, o)
	if err != nil {
		if ctx.Err() != nil {
			return errors.New("interrupted; every node started was stopped")
		}
		return err
	}
	printUsage(out, c)
	<-ctx.Done()
	fmt.Fprintln(out, "stopping the cluster")
	if err := c.Close(); err != nil {
		return err
	}
	if o.Keep {
		fmt.Fprintf(out, "stopped; kept %s\n", c.BaseDir)
	} else {
		fmt.Fprintf(out, "stopped; removed %s\n", c.BaseDir)
	}
	return nil
}

func printUsage(out io.Writer, c *launch.Cluster) {
	var addrs []netip.Addr
	for _, n := range c.Nodes {
		addrs = append(addrs, n.Address)
	}
	logs := c.BaseDir + "/node*.log"
	if c.ProxyURL() != "" {
		logs = c.BaseDir + "/node*/console.log (serial consoles); polisctl goes through the proxy " + c.ProxyURL() + " (saved in its configuration; the same port speaks SOCKS5: " + c.SOCKS5ProxyURL() + ")"
	}
	fmt.Fprintf(out, `
Nodes: %v; logs in %s
Use polisctl as the cluster's owner:

    go run ./cmd/polisctl --config %s node list

or set it once for this shell:

    export POLISCTL_CONFIG=%s

Ctrl-C stops the cluster.
`, addrs, logs, c.ConfigDir, c.ConfigDir)
	if bundle := c.KubernetesBundle(); bundle != "" {
		// With VMs, kubectl reaches the apiservers through the launcher's
		// proxy, as polisctl does: the kubeconfig names it (proxy-url).
		fmt.Fprintf(out, `
Kubernetes runs on %v. As the owner, write a kubeconfig and use it:

    go run ./cmd/polisctl --config %s kubeconfig
    export KUBECONFIG=%s/kubeconfig
    %s kubectl get nodes,deployments -A

(any kubectl of Kubernetes 1.37 does too).
`, c.Nodes[0].Address, c.ConfigDir, c.ConfigDir, bundle)
	}
}
