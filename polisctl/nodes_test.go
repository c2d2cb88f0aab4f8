package polisctl

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	cpb "github.com/polis-os/polis/api/curator/v1"
)

// node describe says what a node runs of its Kubernetes roles, as the node
// reported it, and that a role it does not run is not available.
func TestDescribeKubernetes(t *testing.T) {
	roles := &cpb.Roles{ConsensusMember: &cpb.ConsensusMemberRole{}, KubernetesController: &cpb.KubernetesControllerRole{}, KubernetesWorker: &cpb.KubernetesWorkerRole{}}
	for _, tc := range []struct {
		name  string
		roles *cpb.Roles
		kube  *cpb.KubernetesStatus
		want  []string
		never []string
	}{
		{"ready", roles, &cpb.KubernetesStatus{Running: []string{"apiserver", "controller-manager", "scheduler"}, ApiserverReady: true, ApiserverPort: 6443, WorkerNote: "not available on this kind of node"},
			[]string{"Kubernetes controller: apiserver, controller-manager, scheduler running; apiserver ready on port 6443\n", "Kubernetes worker:     not available on this kind of node\n"}, nil},
		{"starting", roles, &cpb.KubernetesStatus{Running: []string{"apiserver"}, ControllerNote: "scheduler not running"},
			[]string{"Kubernetes controller: apiserver running; apiserver not ready (scheduler not running)\n"}, []string{"ready on"}},
		{"no bundle", roles, &cpb.KubernetesStatus{ControllerNote: "not available: no bundle"},
			[]string{"Kubernetes controller: nothing running (not available: no bundle)\n"}, []string{"ready"}},
		{"pod network", roles, &cpb.KubernetesStatus{NetworkPeers: 2, NetworkInSync: true},
			[]string{"Pod network:           2 peers over WireGuard, in sync\n"}, nil},
		{"pod network not in sync", roles, &cpb.KubernetesStatus{NetworkPeers: 1, WorkerNote: "the pod network is not in line with the peers: injected"},
			[]string{"Pod network:           1 peer over WireGuard, not in sync\n", "not in line with the peers: injected"}, nil},
		{"worker not available", &cpb.Roles{KubernetesWorker: &cpb.KubernetesWorkerRole{}}, &cpb.KubernetesStatus{WorkerNote: "not available: this node agent was given no container runtime"},
			[]string{" not available: this node agent was given no container runtime\n", " not run (the Kubernetes worker is not available on this node)\n"}, []string{"peers"}},
		{"not reported", roles, nil, []string{"Kubernetes controller: not reported by the node yet\n", "Pod network:           not reported by the node yet\n"}, nil},
		{"controller only", &cpb.Roles{KubernetesController: &cpb.KubernetesControllerRole{}}, &cpb.KubernetesStatus{Running: []string{"apiserver"}}, nil, []string{"Pod network"}},
		{"controller routing to Pods", &cpb.Roles{KubernetesController: &cpb.KubernetesControllerRole{}}, &cpb.KubernetesStatus{Running: []string{"apiserver"}, NetworkPeers: 2, NetworkInSync: true},
			[]string{"Pod network:           2 peers over WireGuard, in sync\n"}, []string{"Kubernetes worker"}},
		{"controller's routes not in sync", &cpb.Roles{KubernetesController: &cpb.KubernetesControllerRole{}}, &cpb.KubernetesStatus{NetworkPeers: 1, WorkerNote: "the pod network is not in line with the peers: injected"},
			[]string{"Pod network:           1 peer over WireGuard, not in sync (the pod network is not in line with the peers: injected)\n"}, []string{"Kubernetes worker"}},
		{"role taken away, leftovers", &cpb.Roles{}, &cpb.KubernetesStatus{WorkerNote: "removing what the role left on the machine failed"},
			[]string{"Kubernetes worker: role taken away: removing what the role left on the machine failed\n"}, []string{"Pod network"}},
		{"no roles", &cpb.Roles{}, nil, nil, []string{"Kubernetes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			n := &cpb.Node{Id: "n1", State: cpb.NodeState_NODE_STATE_UP, Roles: tc.roles, Status: &cpb.NodeStatus{ExternalAddress: "192.0.2.1", Kubernetes: tc.kube}}
			if err := writeNode(&b, n); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("describe lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tc.never {
				if strings.Contains(out, w) {
					t.Errorf("describe says %q:\n%s", w, out)
				}
			}
		})
	}
}

// node describe lists the periodic snapshots a consensus member reported,
// newest first, and says when it has none yet.
func TestDescribeSnapshots(t *testing.T) {
	at := time.Date(2026, 11, 25, 14, 0, 0, 0, time.UTC)
	member := &cpb.Roles{ConsensusMember: &cpb.ConsensusMemberRole{}}
	describe := func(roles *cpb.Roles, snaps []*cpb.ConsensusSnapshot) string {
		var b strings.Builder
		n := &cpb.Node{Id: "n1", State: cpb.NodeState_NODE_STATE_UP, Roles: roles, Status: &cpb.NodeStatus{ExternalAddress: "192.0.2.1", ConsensusSnapshots: snaps}}
		if err := writeNode(&b, n); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	out := describe(member, []*cpb.ConsensusSnapshot{
		{TakenAt: timestamppb.New(at), Revision: 1234, Size: 3 << 20},
		{TakenAt: timestamppb.New(at.Add(-time.Hour)), Revision: 1000, Size: 512},
	})
	for _, want := range []string{
		"Consensus snapshots: 2 on the node's disk, newest first\n",
		"  2026-11-25T14:00:00Z  revision 1234  3.0 MiB\n",
		"  2026-11-25T13:00:00Z  revision 1000  512 B\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("describe lacks %q:\n%s", want, out)
		}
	}
	if out := describe(member, nil); !strings.Contains(out, "Consensus snapshots: none yet\n") {
		t.Errorf("a member without snapshots:\n%s", out)
	}
	if out := describe(&cpb.Roles{}, nil); strings.Contains(out, "snapshots") {
		t.Errorf("a node that is no member:\n%s", out)
	}
}
