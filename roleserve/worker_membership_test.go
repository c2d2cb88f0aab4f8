package roleserve

import (
	"context"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/curator"
	"github.com/polis-os/polis/curator/client"
	"github.com/polis-os/polis/supervisor/supervisortest"
)

// recordingDial is the membership worker's dial seam: it records every
// configuration and hands out connections to a fake curator.
type recordingDial struct {
	dial func() *grpc.ClientConn

	mu    sync.Mutex
	cfgs  []client.Config
	conns []*grpc.ClientConn
}

func newRecordingDial(t *testing.T, f *fakeCurator) *recordingDial {
	lis := serveCurator(t, f)
	return &recordingDial{dial: func() *grpc.ClientConn { return dialFake(t, lis) }}
}

func (d *recordingDial) Dial(cfg client.Config) (*grpc.ClientConn, error) {
	conn := d.dial()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cfgs = append(d.cfgs, cfg)
	d.conns = append(d.conns, conn)
	return conn, nil
}

func (d *recordingDial) dialled() ([]client.Config, []*grpc.ClientConn) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.cfgs), slices.Clone(d.conns)
}

func endpointsEq(want ...*cpb.CuratorEndpoint) func([]*cpb.CuratorEndpoint) bool {
	return func(got []*cpb.CuratorEndpoint) bool { return sameEndpoints(got, want) }
}

// enrolThroughRemote gives the membership worker running over v
// credentials, no local curator and a directory of one remote curator, and
// returns them with the membership it makes.
func enrolThroughRemote(t *testing.T, v *Values) (*Credentials, *cpb.CuratorEndpoint, *ClusterMembership) {
	t.Helper()
	creds := testCredentials(t)
	remote := &cpb.CuratorEndpoint{NodeId: "node-remote", Address: "192.0.2.20", Port: 7835}
	v.Credentials.Set(creds)
	v.LocalCurator.Set(nil)
	v.Directory.Set([]*cpb.CuratorEndpoint{remote})
	return creds, remote, waitFor(t, &v.Membership, "a membership", hasCurator)
}

// The membership makes one connection per credentials; the curators it
// searches follow the local control plane and the directory under that
// connection; new credentials make a new connection and close the old one;
// so does the end of the worker.
func TestMembership(t *testing.T) {
	f := newFakeCurator()
	d := newRecordingDial(t, f)
	v := NewValues()
	var g Graph
	w := newWorkerMembership(&g, v, d.Dial)
	s, cancel := supervisortest.HarnessTree(t, w.run)

	creds, remote, m := enrolThroughRemote(t, v)
	if m.Credentials != creds {
		t.Errorf("membership has credentials %v, want %v", m.Credentials.NodeID, creds.NodeID)
	}
	cfgs, conns := d.dialled()
	if len(cfgs) != 1 {
		t.Fatalf("dialled %d times, want once", len(cfgs))
	}
	cfg := cfgs[0]
	if cfg.TLS == nil || len(cfg.TLS.Certificates) != 1 || cfg.TLS.ServerName != "" {
		t.Errorf("TLS configuration %+v: want the node certificate and no server name", cfg.TLS)
	}
	waitFor(t, cfg.Directory, "the directory's curators", endpointsEq(remote))
	// The connection works: it reaches the curator.
	if _, err := cpb.NewCuratorServiceClient(m.Curator).Heartbeat(context.Background(), &cpb.HeartbeatRequest{}); err != nil {
		t.Fatalf("heartbeat through the membership: %v", err)
	}

	// A local curator that serves is put first; the connection stays.
	localEP := &cpb.CuratorEndpoint{NodeId: creds.NodeID, Address: "192.0.2.1", Port: 7835}
	v.LocalCurator.Set(localEP)
	waitFor(t, cfg.Directory, "the local curator first", endpointsEq(localEP, remote))

	// The directory grows, and names this node too: it is listed once,
	// first.
	other := &cpb.CuratorEndpoint{NodeId: "node-other", Address: "192.0.2.21", Port: 7835}
	v.Directory.Set([]*cpb.CuratorEndpoint{remote, localEP, other})
	waitFor(t, cfg.Directory, "the new directory", endpointsEq(localEP, remote, other))

	// The local curator stops serving: the directory as it is.
	v.LocalCurator.Set(nil)
	waitFor(t, cfg.Directory, "the directory alone", endpointsEq(remote, localEP, other))
	if cfgs, _ := d.dialled(); len(cfgs) != 1 {
		t.Fatalf("dialled %d times for one set of credentials", len(cfgs))
	}

	// New credentials: a new connection, the old one closed.
	creds2 := testCredentials(t)
	v.Credentials.Set(creds2)
	m2 := waitFor(t, &v.Membership, "the new membership", func(m *ClusterMembership) bool { return m.Credentials == creds2 })
	cfgs, conns2 := d.dialled()
	if len(cfgs) != 2 || m2.Curator != conns2[1] {
		t.Fatalf("dialled %d times; want a second connection for the new credentials", len(cfgs))
	}
	// Closed right after the new membership is published.
	waitClosed(t, conns[0], "the old connection")

	// The end of the worker withdraws the membership and closes the
	// connection it made.
	cancel()
	s.Wait()
	if m := latest(&v.Membership); m != nil {
		t.Errorf("membership %v left behind with a closed connection", m)
	}
	if st := conns2[1].GetState(); st != connectivity.Shutdown {
		t.Errorf("the connection is %v after the worker ended, want closed", st)
	}
}

func waitClosed(t *testing.T, conn *grpc.ClientConn, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for st := conn.GetState(); st != connectivity.Shutdown; st = conn.GetState() {
		if !conn.WaitForStateChange(ctx, st) {
			t.Fatalf("%s is still %v, want closed", what, st)
		}
	}
}

// A curator listening on every address is reached through loopback.
func TestCuratorEndpointUnspecified(t *testing.T) {
	for addr, want := range map[string]string{"0.0.0.0:7835": "127.0.0.1", "[::]:7835": "::1", "192.0.2.1:7835": "192.0.2.1"} {
		ep := (&curator.Status{NodeID: "node-x", Address: netip.MustParseAddrPort(addr)}).Endpoint()
		if ep.GetAddress() != want || ep.GetPort() != 7835 || ep.GetNodeId() != "node-x" {
			t.Errorf("curator at %s: endpoint %v, want %s:7835", addr, ep, want)
		}
	}
	if ep := (*curator.Status)(nil).Endpoint(); ep != nil {
		t.Errorf("no local curator: %v", ep)
	}
}

// A local curator that does not serve (defect 1 of issue 15: on main, the
// membership waited 30 s for it, then withdrew a working membership and
// closed its connection) changes nothing: the membership made through the
// remote curator stays, its connection keeps working, and nothing is
// dialled again.
func TestMembershipKeptWhileLocalCuratorDoesNotServe(t *testing.T) {
	f := newFakeCurator()
	d := newRecordingDial(t, f)
	v := NewValues()
	var g Graph
	w := newWorkerMembership(&g, v, d.Dial)
	supervisortest.Harness(t, w.run)

	_, remote, m := enrolThroughRemote(t, v)

	// A control plane starts here; its curator does not serve. On main
	// that was a LocalControlPlane whose curator's Status stayed unset.
	v.LocalControlPlane.Set(&LocalControlPlane{Curator: &fakeLocalCurator{}})
	// The directory changes meanwhile: the worker must still be
	// reacting, not stuck waiting on the local curator.
	other := &cpb.CuratorEndpoint{NodeId: "node-other", Address: "192.0.2.21", Port: 7835}
	v.Directory.Set([]*cpb.CuratorEndpoint{remote, other})
	cfgs, _ := d.dialled()
	waitFor(t, cfgs[0].Directory, "the new directory", endpointsEq(remote, other))
	if got := latest(&v.Membership); got != m {
		t.Fatalf("membership replaced or withdrawn: %v", got)
	}
	if _, err := cpb.NewCuratorServiceClient(m.Curator).Heartbeat(context.Background(), &cpb.HeartbeatRequest{}); err != nil {
		t.Fatalf("the membership's connection stopped working: %v", err)
	}
	if cfgs, _ := d.dialled(); len(cfgs) != 1 {
		t.Fatalf("dialled %d times", len(cfgs))
	}
}
