package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/logring"
	"github.com/polis-os/polis/node"
	"github.com/polis-os/polis/node/pid1"
	"github.com/polis-os/polis/nodeapi"
	"github.com/polis-os/polis/supervisor"
)

// stopTimeout bounds how long a halt waits for the agent's runnables.
const stopTimeout = 30 * time.Second

// dataSealing maps PID 1's Machine.DataSealing to the status' field.
var dataSealing = map[string]cpb.DataSealing{
	pid1.DataSealingNone:     cpb.DataSealing_DATA_SEALING_NONE,
	pid1.DataSealingSoftware: cpb.DataSealing_DATA_SEALING_SOFTWARE,
	pid1.DataSealingTPM:      cpb.DataSealing_DATA_SEALING_TPM,
}

// runAsInit is the agent as the node image's init: pid1.Boot prepares the
// machine, the agent runs until the power button asks for a halt, and
// pid1 halts the machine. It never returns normally: PID 1 must not exit.
func runAsInit() {
	console := func(format string, args ...any) { fmt.Fprintf(os.Stdout, format+"\n", args...) }
	// A data disk bound to its cluster needs its cluster part before it
	// unlocks: the agent's code asks the curators, from what the ESP holds.
	m, err := pid1.Boot(console, pid1.BootOptions{ClusterPart: node.FetchClusterPart})
	if err != nil {
		pid1.Fatal(console, err)
	}
	if m.DiskBench != "" {
		// Measuring the data disk (docs/benchmarks.md), not a node.
		if err := runDiskBench(console, m); err != nil {
			pid1.Fatal(console, err)
		}
		m.Halt(pid1.PowerOff)
	}
	// The same flags a development node gets, so the defaults (ports,
	// lease, heartbeat) are the same, and those the kernel command line
	// sets (pid1.AgentFlags); the parameters come from fw_cfg.
	args := []string{"--storage", m.StorageRoot, "--address", m.Address.Addr().String()}
	if m.System {
		// The system disk carries the Kubernetes bundle and the container
		// runtime: the node may hold either Kubernetes role.
		args = append(args, "--kubernetes-bundle", pid1.SystemKubeBundle, "--kubernetes-runtime", pid1.SystemRoot)
	}
	o, err := parseFlags(append(args, m.AgentArgs...), os.Stdout)
	if err != nil {
		pid1.Fatal(console, err)
	}
	o.cfg.FWCfg = node.FWCfgParametersPath
	o.cfg.Cgroups = pid1.CgroupRoot
	// The node's configuration is sealed by the machine's TPM, as its
	// data disk's key is; without a TPM, the agent's default (Unsealed).
	if s := m.Sealer(); s != nil {
		o.cfg.Sealer = s
	}
	o.cfg.DataSealing = dataSealing[m.DataSealing]
	if d := m.DataDisk(); d != nil {
		o.cfg.DataDisk = d
	}
	ring := logring.New(logring.Config{})
	o.cfg.LogRing = ring
	o.cfg.Power = func(a nodeapi.PowerAction) {
		if a == nodeapi.Reboot {
			m.Request(pid1.Reboot)
			return
		}
		m.Request(pid1.PowerOff)
	}
	n, err := node.New(o.cfg)
	if err != nil {
		pid1.Fatal(console, err)
	}
	console("%s (version %s, address %v)", pid1.BootedMessage, node.Version, m.Address)
	base := newLogger("console", zapcore.InfoLevel, os.Stdout, ring)
	ctx, cancel := context.WithCancel(context.Background())
	// A recovery this boot was asked for (polis.recover-single-member) is
	// prepared before the agent runs, as polis-node does. A command that
	// is refused exits with the reason; PID 1 cannot, and retrying in the
	// agent's supervisor would keep the node out of a cluster whose
	// quorum still answers. So it says why on the console and starts the
	// node as usual: a refusal means the cluster is not lost (or this
	// node's data cannot recover it), and as usual the node rejoins it.
	if err := n.PrepareRecovery(ctx, base.Named("root")); err != nil {
		console("%s %v; starting the node as usual", pid1.RecoveryRefusedMessage, err)
		o.cfg.RecoverConsensus = false
		if n, err = node.New(o.cfg); err != nil {
			pid1.Fatal(console, err)
		}
	}
	s := supervisor.New(ctx, n.Run, supervisor.WithLogger(base))
	action := <-m.Requests()
	base.Named("main").Info("stopping the node agent", zap.Stringer("then", action))
	cancel()
	stopped := make(chan struct{})
	go func() { s.Wait(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(stopTimeout):
		console("polis: the node agent did not stop within %v; halting anyway", stopTimeout)
	}
	m.Halt(action)
}
