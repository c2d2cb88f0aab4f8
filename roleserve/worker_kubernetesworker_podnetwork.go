package roleserve

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	"go.uber.org/zap"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/clusternet"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/event/memory"
	"github.com/polis-os/polis/supervisor"
)

// routesHeld says whether the node holds what routing to Pods for
// KubernetesController needs but for a pod range (routesWanted): it then
// keeps the pod network it has, and waits for its range.
func (w *workerKubernetesWorker) routesHeld(roles *cpb.Roles) bool {
	return roles.GetKubernetesWorker() == nil && roles.GetKubernetesController() != nil && w.cfg.Runtime != nil
}

// routesWanted says whether the node, not holding KubernetesWorker, routes
// to the workers' Pods all the same (runRoutes): it holds
// KubernetesController, whose apiserver calls webhooks, aggregated APIs
// and pods' and services' proxies served by Pods, has a container runtime
// (which is to say the machine's network is the node's own: a VM node),
// and has a pod range from the curator, whose first address is its end
// of the tunnel (clusternet's tunnelAddress).
func (w *workerKubernetesWorker) routesWanted(roles *cpb.Roles, podRange netip.Prefix) bool {
	return w.routesHeld(roles) && podRange.IsValid()
}

// runRoutes runs the pod network alone (clusternet.Run as a child,
// "podnetwork"), for a node that holds KubernetesController without
// KubernetesWorker (routesWanted): routes to every worker's pod range,
// over WireGuard from the first address of the node's own range, so that
// the apiserver here reaches Pods and Pods' answers come back to it; the
// workers route the node's range to it in turn. No Pod runs here, so no
// egress rule is written. It reports the pod network in the status
// (Held false, PodRoutes set) until routesWanted no longer holds or the
// pod range changes; it then returns errKubernetesWorkerStop, and what it
// set up stays for runNode to take over, or for the next run to remove.
func (w *workerKubernetesWorker) runRoutes(ctx context.Context, podRange netip.Prefix) error {
	w.runningPodRange = podRange
	// Whatever happens from here, the pod network may be the node's to
	// remove once it no longer routes.
	w.dirty = true
	log := supervisor.Logger(ctx)
	key, err := w.loadKey(&KubernetesWorkerStatus{PodRoutes: true})
	if err != nil {
		return err
	}
	// Until the next run says otherwise: the routes' child has stopped.
	supervisor.Cleanup(ctx, func() { w.status.Set(&KubernetesWorkerStatus{PodRoutes: true, Note: noteStopped}) })
	// No Pods here: no egress rule (ClusterPodRange unset).
	netStatus, err := w.startPodNetwork(ctx, clusternet.Config{PrivateKey: key, PodCIDR: podRange, MTU: w.podMTU(log)})
	if err != nil {
		return err
	}
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	in := w.Inputs()
	defer in.Close()
	roles := Input(in, w.localRoles, notNil)
	podRanges := Input(in, w.podRange, nil)
	podNetwork := Input(in, event.ValueWatch[*clusternet.Status](netStatus), nil)
	for {
		why, err := in.Wait(ctx)
		if err != nil {
			return err
		}
		if r := podRanges.Latest(); !w.routesWanted(roles.Latest(), r) || r != podRange {
			log.Info("no longer routing to Pods for KubernetesController alone", zap.Stringer("because", why), zap.Stringer("podRange", r))
			return errKubernetesWorkerStop
		}
		w.status.Set(routesStatus(podNetwork.Latest()))
	}
}

// routesStatus is the status of a node that routes to Pods for
// KubernetesController alone (runRoutes), from what the pod network says
// (nil until its first attempt).
func routesStatus(net *clusternet.Status) *KubernetesWorkerStatus {
	return &KubernetesWorkerStatus{PodRoutes: true, NetworkPeers: net.PeerIDs(), NetworkInSync: net != nil && net.InSync, Note: truncateNote(podNetworkNote(net))}
}

// podNetworkNote says why the pod network (nil until its first attempt)
// is not in line with the peers; "" when it is.
func podNetworkNote(net *clusternet.Status) string {
	switch {
	case net == nil:
		return "the pod network has not configured the kernel yet"
	case net.LastError != "":
		return "the pod network is not in line with the peers: " + net.LastError
	}
	return ""
}

// podMTU is the MTU of the WireGuard device and of every Pod on this node:
// the cluster link's less WireGuard's overhead, so that a Pod's packet to
// another node crosses the tunnel whole, and a larger link (jumbo frames)
// carries larger packets. clusternet's default (a 1500-byte link's) when
// the link is not found.
func (w *workerKubernetesWorker) podMTU(log *zap.Logger) int {
	link, err := w.linkMTU(w.address)
	if err != nil {
		log.Warn("the cluster link's MTU is unknown: the pod network takes the default", zap.Int("mtu", clusternet.DefaultMTU), zap.Error(err))
		return clusternet.DefaultMTU
	}
	mtu := clusternet.TunnelMTU(link)
	log.Info("pod network MTU", zap.Int("mtu", mtu), zap.Int("clusterLinkMTU", link))
	return mtu
}

// startPodNetwork runs the pod network (w.runPodNetwork) as the child
// "podnetwork" with c, given the node's address, the peers and a status
// value of its own, which it returns: nil until the pod network's first
// attempt.
func (w *workerKubernetesWorker) startPodNetwork(ctx context.Context, c clusternet.Config) (*memory.Value[*clusternet.Status], error) {
	netStatus := &memory.Value[*clusternet.Status]{Name: clusternet.StatusName}
	netStatus.Set(nil)
	c.Address, c.Peers, c.Status = w.address, w.peers, netStatus
	if err := supervisor.Run(ctx, "podnetwork", func(ctx context.Context) error { return w.runPodNetwork(ctx, c) }); err != nil {
		return nil, err
	}
	return netStatus, nil
}

// loadKey loads the pod network's WireGuard key (made if there is none);
// when it cannot be used, the status becomes st with a note naming the
// key file and what is wrong, and the error says so too.
func (w *workerKubernetesWorker) loadKey(st *KubernetesWorkerStatus) (clusternet.Key, error) {
	key, err := clusternet.LoadOrCreateKey(w.keyFile)
	if err != nil {
		note := err.Error()
		if !strings.Contains(note, w.keyFile) {
			note = w.keyFile + ": " + note
		}
		st.Note = truncateNote(noteNoKey + note)
		w.status.Set(st)
		return key, fmt.Errorf("the pod network's WireGuard key: %w", err)
	}
	return key, nil
}
