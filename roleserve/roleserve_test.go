package roleserve

import (
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/supervisor/supervisortest"
)

func testConfig(t *testing.T, creds *Credentials, dial DialFunc) Config {
	return Config{
		Node:             testNode,
		ControlPlane:     ControlPlaneConfig{NodeKey: creds.Key, EtcdDir: t.TempDir()},
		RolesFile:        rolesFile(t),
		DirectoryFile:    directoryFile(t),
		WireGuardKeyFile: filepath.Join(t.TempDir(), "wireguard.key"),
		Dial:             dial,
	}
}

// The graph New declares: every worker's reads and writes, checked and
// compared with the text logged at start.
func TestRoleServerGraph(t *testing.T) {
	rs, err := New(testConfig(t, testCredentials(t), nil), NewValues())
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Graph().Check(slices.Collect(maps.Keys(externalValues))...); err != nil {
		t.Errorf("Check: %v", err)
	}
	const want = `clusterdirectory: reads membership; writes directory
clusternet: reads membership; writes clusterPodRange, localPodRange, networkPeers
controlplane: reads localRoles; writes consensus.status, consensusSnapshots, curator.status, localControlPlane, localCurator
heartbeat: reads membership; writes nothing
kubernetes: reads consensus.status, localControlPlane, localRoles; writes kube.controlplane.status, kubernetes
kubernetesworker: reads clusterPodRange, localLabels, localPodRange, localRoles, membership, networkPeers; writes clusternet.status, kube.dns.status, kube.kubelet.status, kube.proxy.status, kubernetesWorker
membership: reads credentials, directory, localCurator; writes membership
rolefetch: reads membership; writes localLabels, localRoles
statuspush: reads consensusSnapshots, dataClusterBound, kubernetes, kubernetesWorker, localCurator, membership; writes nothing
`
	if got := rs.Graph().String(); got != want {
		t.Errorf("graph:\n%s\nwant:\n%s", got, want)
	}
}

func TestRoleServerConfig(t *testing.T) {
	_, err := New(Config{}, NewValues())
	for _, field := range []string{"ExternalAddress", "NodeKey", "EtcdDir", "RolesFile", "DirectoryFile", "WireGuardKeyFile"} {
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("New with an empty config: %v, want it to name %s", err, field)
		}
	}
}

// The whole role server over a fake curator: once enrolment provides the
// credentials, every worker acts.
func TestRoleServerRun(t *testing.T) {
	creds := testCredentials(t)
	f := newFakeCurator()
	f.nodes.Set([]*cpb.Node{
		node(creds.NodeID, workerRoles, nil),
		node("node-a", consensusRoles, running("192.0.2.10", 7835)),
	})
	f.directory.Set([]*cpb.CuratorEndpoint{{NodeId: "node-a", Address: "192.0.2.10", Port: 7835}})
	d := newRecordingDial(t, f)
	v := NewValues()
	rs, err := New(testConfig(t, creds, d.Dial), v)
	if err != nil {
		t.Fatal(err)
	}
	supervisortest.Harness(t, rs.Run)
	v.Credentials.Set(creds)

	waitFor(t, &v.LocalRoles, "the roles", protoEq(workerRoles))
	waitFor(t, &v.KubernetesWorker, "the Kubernetes worker status", func(s *KubernetesWorkerStatus) bool { return s != nil && s.Held && s.Note == noteNoRuntime })
	waitFor(t, &v.Directory, "the directory", endpointsEq(&cpb.CuratorEndpoint{NodeId: "node-a", Address: "192.0.2.10", Port: 7835}))
	waitFor(t, &f.statuses, "a status", statusCount(1))
	waitFor(t, &f.heartbeats, "a heartbeat", beats(1))
	if lcp := latest(&v.LocalControlPlane); lcp != nil {
		t.Errorf("a control plane runs without ConsensusMember: %+v", lcp)
	}
}
