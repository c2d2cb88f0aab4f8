package node_test

import (
	"testing"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/consensus"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/node/nodetest"
	"github.com/polis-os/polis/roleserve"
)

// BenchmarkRoleChange measures, in an in-process two-node cluster, the time
// from an operator's role change in the curator to the matching worker on
// the node having reacted:
//
//   - kubernetes-worker: UpdateNodeRoles → the kubernetes worker publishes
//     the role (the path every role takes: curator, node cache, the node's
//     Watch, rolefetch, the worker);
//   - consensus-member: UpdateNodeRoles → the node's consensus member is a
//     voter (learner join and promotion included), and back: the role
//     removed → the control plane withdrawn.
func BenchmarkRoleChange(b *testing.B) {
	c := nodetest.FormCluster(b, 2, &subnets)
	mgmt, ids, second := c.Management, c.IDs, c.Node(1)
	set := func(req *cpb.UpdateNodeRolesRequest) {
		b.Helper()
		req.NodeId = ids[1]
		if _, err := mgmt.UpdateNodeRoles(nodetest.Context(b), req); err != nil {
			b.Fatalf("UpdateNodeRoles: %v", err)
		}
	}
	yes, no := true, false
	waitKubernetes := func(want bool) {
		b.Helper()
		if _, err := event.Get(nodetest.Context(b), &second.Agent.Values().KubernetesWorker, event.Filter(func(k *roleserve.KubernetesWorkerStatus) bool { return k != nil && k.Held == want })); err != nil {
			b.Fatal(err)
		}
	}

	b.Run("kubernetes-worker", func(b *testing.B) {
		for b.Loop() {
			set(&cpb.UpdateNodeRolesRequest{KubernetesWorker: &yes})
			waitKubernetes(true)
			b.StopTimer()
			set(&cpb.UpdateNodeRolesRequest{KubernetesWorker: &no})
			waitKubernetes(false)
			b.StartTimer()
		}
	})

	b.Run("consensus-member", func(b *testing.B) {
		for b.Loop() {
			set(&cpb.UpdateNodeRolesRequest{ConsensusMember: &yes})
			lcp, err := event.Get(nodetest.Context(b), &second.Agent.Values().LocalControlPlane, event.Filter(func(l *roleserve.LocalControlPlane) bool { return l != nil }))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := event.Get(nodetest.Context(b), lcp.Consensus.Status(), event.Filter(consensus.IsVoter)); err != nil {
				b.Fatal(err)
			}
			set(&cpb.UpdateNodeRolesRequest{ConsensusMember: &no})
			if _, err := event.Get(nodetest.Context(b), &second.Agent.Values().LocalControlPlane, event.Filter(func(l *roleserve.LocalControlPlane) bool { return l == nil })); err != nil {
				b.Fatal(err)
			}
		}
	})
}
