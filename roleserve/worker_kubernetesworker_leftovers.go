package roleserve

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/polis-os/polis/clusternet"
	"github.com/polis-os/polis/internal/cgroupdir"
	"github.com/polis-os/polis/kube/kubelet"
	"github.com/polis-os/polis/kube/proxy"
	"github.com/polis-os/polis/supervisor"
)

// A failed removal of what the role left is tried again after
// leftoversRetry, doubled at each failure up to leftoversRetryMax.
const (
	leftoversRetry    = 5 * time.Second
	leftoversRetryMax = 5 * time.Minute
)

// cleanupStep is one thing running the role leaves on the machine, and
// how to remove it: idempotent, finding nothing to remove is no error.
type cleanupStep struct {
	name string
	// gate: the steps after it wait until it succeeds.
	gate bool
	// podNetwork marks the pod network's step: a node that routes to
	// Pods for KubernetesController alone (runRoutes) keeps it.
	podNetwork bool
	run        func(ctx context.Context) error
}

// leftoverSteps are what running the role on rt leaves on the machine once
// the node has stopped, in the order they are removed: none without a
// runtime (a process-mode node runs no Pods, and the machine's network is
// not its own). The node's cgroup must be empty first: the rest would pull
// the network from under Pods that still ran. The pod network's device
// and routes (kept across an agent's restart), kube-proxy's nftables
// tables (which would go on sending ClusterIPs to Pods long gone) and
// portmap's, the Pods' bridge with its gateway address and route, and
// CNI's state (host-local's reservations, cached results): Pods are
// killed through their cgroup, so CNI DEL never ran for them.
func leftoverSteps(rt *KubernetesRuntime) []cleanupStep {
	if rt == nil {
		return nil
	}
	return []cleanupStep{
		{name: "the Kubernetes node's processes", gate: true, run: func(context.Context) error { return nodeStopped(rt.Cgroup) }},
		{name: "the pod network's WireGuard device and routes", podNetwork: true, run: func(context.Context) error { return clusternet.Clear(clusternet.Config{}) }},
		{name: "the nftables tables of kube-proxy and host ports", run: func(ctx context.Context) error {
			return proxy.DeleteTables(ctx, rt.BinDir, append(proxy.Tables(), kubelet.HostPortTable))
		}},
		{name: "the Pods' bridge " + kubelet.Bridge, run: func(context.Context) error { return kubelet.DeleteBridge() }},
		{name: "the Pods' CNI state", run: func(context.Context) error { return kubelet.RemoveCNIState(kubelet.CNIStateDir) }},
	}
}

// nodeStopped fails while processes are left in the Kubernetes node's
// cgroup (kubelet.Config.Cgroup; none in tests): the runner's stop killed
// them all, and the kernel's word for it is checked, not assumed.
func nodeStopped(cgroup string) error {
	if cgroup == "" {
		return nil
	}
	populated, err := cgroupdir.Populated(cgroup)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case populated:
		return fmt.Errorf("processes are left in %s", cgroup)
	}
	return nil
}

// removeLeftovers removes what the role left (w.left, taken from
// w.leftovers when the machine is dirty), each step in turn, and keeps
// those that failed (and the ones after a failed gate) for the next try;
// it returns the failures, each with its step's name. With keepNetwork
// (the node routes to Pods for KubernetesController, and takes the pod
// network over as it is) the pod network's step is kept, not run, for
// when the node no longer routes.
func (w *workerKubernetesWorker) removeLeftovers(ctx context.Context, keepNetwork bool) error {
	log := supervisor.Logger(ctx)
	if w.dirty {
		w.left, w.dirty = slices.Clone(w.leftovers), false
	}
	var failed []cleanupStep
	var errs []error
	for i, s := range w.left {
		if keepNetwork && s.podNetwork {
			failed = append(failed, s)
			continue
		}
		err := s.run(ctx)
		if err == nil {
			log.Info("removed what the KubernetesWorker role left", zap.String("what", s.name))
			continue
		}
		log.Warn("removing what the KubernetesWorker role left", zap.String("what", s.name), zap.Error(err))
		failed = append(failed, s)
		errs = append(errs, fmt.Errorf("%s: %w", s.name, err))
		if s.gate {
			failed = append(failed, w.left[i+1:]...)
			break
		}
	}
	w.left = failed
	return errors.Join(errs...)
}

// leftToRemove says whether steps are left to remove (w.left), not
// counting the pod network's with keepNetwork.
func (w *workerKubernetesWorker) leftToRemove(keepNetwork bool) bool {
	return slices.ContainsFunc(w.left, func(s cleanupStep) bool { return !keepNetwork || !s.podNetwork })
}
