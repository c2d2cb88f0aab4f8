package roleserve

import (
	"net/netip"
	"testing"

	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/supervisor/supervisortest"
)

var testNode = NodeInfo{ExternalAddress: netip.MustParseAddr("192.0.2.1"), Version: "v0.1.0-test", BootID: "boot-1"}

func statusCount(n int) func([]*cpb.NodeStatus) bool {
	return func(s []*cpb.NodeStatus) bool { return len(s) >= n }
}

// runStatusPush runs the statuspush worker over v for the test, with the
// membership m and its other inputs set, empty.
func runStatusPush(t *testing.T, v *Values, m *ClusterMembership) {
	v.Membership.Set(m)
	v.LocalCurator.Set(nil)
	v.Kubernetes.Set(nil)
	v.KubernetesWorker.Set(nil)
	v.ConsensusSnapshots.Set(nil)
	var g Graph
	supervisortest.Harness(t, newWorkerStatusPush(&g, v, testNode, 7834).run)
}

// The status is reported at start, again only when it changes or the
// membership does, and with the port of the local curator while one runs.
func TestStatusPush(t *testing.T) {
	f := newFakeCurator()
	creds := testCredentials(t)
	v := NewValues()
	runStatusPush(t, v, fakeMembership(t, f, creds))

	first := waitFor(t, &f.statuses, "the first status", statusCount(1))[0]
	want := &cpb.NodeStatus{ExternalAddress: "192.0.2.1", Version: "v0.1.0-test", BootId: "boot-1", ConsensusPeerPort: 7834}
	if first.GetTimestamp() == nil {
		t.Errorf("status %v has no timestamp", first)
	}
	if first.Timestamp = nil; !proto.Equal(first, want) {
		t.Errorf("status %v, want %v", first, want)
	}

	// An unchanged status is not sent again: the next call is the one
	// for the curator that starts.
	v.LocalCurator.Set(nil)
	v.LocalCurator.Set(servingStatus(creds.NodeID, "192.0.2.1:7835").Endpoint())
	got := waitFor(t, &f.statuses, "the status with the curator", statusCount(2))
	if len(got) != 2 || got[1].GetRunningCurator().GetPort() != 7835 {
		t.Fatalf("statuses %v: want one more, with the curator on port 7835", got)
	}
	// The same curator published anew: still nothing to report.
	v.LocalCurator.Set(servingStatus(creds.NodeID, "192.0.2.1:7835").Endpoint())

	// A new membership is told the status even though it did not change.
	// Once it has been, the worker has also seen the republished curator,
	// which it must not have reported to the first.
	f2 := newFakeCurator()
	v.Membership.Set(fakeMembership(t, f2, testCredentials(t)))
	got2 := waitFor(t, &f2.statuses, "the status for the new membership", statusCount(1))
	if got2[0].GetRunningCurator().GetPort() != 7835 {
		t.Errorf("status %v for the new membership: want the curator on port 7835", got2[0])
	}
	if got := latest(&f.statuses); len(got) != 2 {
		t.Errorf("the first curator got %d statuses, want 2: %v", len(got), got)
	}

	// What runs of Kubernetes is reported too.
	v.KubernetesWorker.Set(&KubernetesWorkerStatus{Held: true, ContainerdRunning: true, KubeletRunning: true, Note: "the Node is not Ready"})
	v.Kubernetes.Set(&KubernetesStatus{Controller: true, Running: []string{"apiserver"}, APIServer: netip.MustParseAddrPort("192.0.2.1:6443"),
		ControllerNote: "controller-manager not running"})
	wantKube := &cpb.KubernetesStatus{Running: []string{"apiserver"}, ApiserverPort: 6443,
		ControllerNote: "controller-manager not running", ContainerdRunning: true, KubeletRunning: true, WorkerNote: "the Node is not Ready"}
	got2 = waitFor(t, &f2.statuses, "the status with Kubernetes", func(s []*cpb.NodeStatus) bool {
		return len(s) > 0 && proto.Equal(s[len(s)-1].GetKubernetes(), wantKube)
	})
	// No Kubernetes role, no Kubernetes status.
	n := len(got2)
	v.Kubernetes.Set(&KubernetesStatus{})
	v.KubernetesWorker.Set(&KubernetesWorkerStatus{})
	waitFor(t, &f2.statuses, "the status without Kubernetes", func(s []*cpb.NodeStatus) bool {
		return len(s) > n && s[len(s)-1].GetKubernetes() == nil
	})
}

// A failed report fails the worker; its restart reports again.
func TestStatusPushRetriesThroughRestart(t *testing.T) {
	f := newFakeCurator()
	f.failUpdates = 2
	v := NewValues()
	runStatusPush(t, v, fakeMembership(t, f, testCredentials(t)))
	waitFor(t, &f.statuses, "the status after two failures", statusCount(1))
}

// The reaction to a new membership does not depend on the value's name:
// renamed, a new membership is still told the unchanged status.
func TestStatusPushNewMembershipWhateverItsName(t *testing.T) {
	f := newFakeCurator()
	v := NewValues()
	v.Membership.Name = "renamed-membership"
	runStatusPush(t, v, fakeMembership(t, f, testCredentials(t)))
	waitFor(t, &f.statuses, "the first status", statusCount(1))
	f2 := newFakeCurator()
	v.Membership.Set(fakeMembership(t, f2, testCredentials(t)))
	waitFor(t, &f2.statuses, "the status for the new membership", statusCount(1))
}
