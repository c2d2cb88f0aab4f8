package polisctl

import (
	"strings"
	"testing"

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
		{"not reported", roles, nil, []string{"Kubernetes controller: not reported by the node yet\n"}, nil},
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
