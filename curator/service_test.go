package curator

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/event"
)

func TestServeAndAuthorize(t *testing.T) {
	c := newTestCluster(t)
	// Anyone may ask who leads.
	resp, err := cpb.NewCuratorServiceClient(c.anonymous()).GetLeader(ctxT(t), &cpb.GetLeaderRequest{})
	if err != nil {
		t.Fatalf("GetLeader: %v", err)
	}
	if resp.Leader.GetNodeId() != c.status.NodeID || resp.Responder.GetNodeId() != c.status.NodeID {
		t.Fatalf("GetLeader = %v", resp)
	}
	// Nobody but a user may manage.
	_, err = cpb.NewManagementServiceClient(c.anonymous()).GetRegisterTicket(ctxT(t), &cpb.GetRegisterTicketRequest{})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("anonymous GetRegisterTicket: %v, want PermissionDenied", err)
	}
	_, err = cpb.NewManagementServiceClient(c.asFirstNode()).GetRegisterTicket(ctxT(t), &cpb.GetRegisterTicketRequest{})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("node GetRegisterTicket: %v, want PermissionDenied", err)
	}
	_, err = cpb.NewManagementServiceClient(c.asOwner()).GetRegisterTicket(ctxT(t), &cpb.GetRegisterTicketRequest{})
	if status.Code(err) == codes.PermissionDenied || status.Code(err) == codes.Unauthenticated {
		t.Fatalf("owner GetRegisterTicket: %v, want it let through", err)
	}
}

// Every call but the quiet ones leaves an audit record naming the method,
// the caller and the outcome.
func TestCallsAreLogged(t *testing.T) {
	c := newTestCluster(t)
	core, logs := observer.New(zap.InfoLevel)
	c.curator.logger.Store(zap.New(core))

	_, err := cpb.NewManagementServiceClient(c.anonymous()).ApproveNode(ctxT(t), &cpb.ApproveNodeRequest{NodeId: "node-x"})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("anonymous ApproveNode: %v", err)
	}
	if _, err := cpb.NewCuratorServiceClient(c.asFirstNode()).Heartbeat(ctxT(t), &cpb.HeartbeatRequest{}); err != nil {
		t.Fatalf("Heartbeat: %v", err)
	}
	entries := logs.FilterMessage("call").All()
	if len(entries) != 1 {
		t.Fatalf("logged %d calls, want only the refused ApproveNode: %v", len(entries), entries)
	}
	f := entries[0].ContextMap()
	if f["method"] != cpb.ManagementService_ApproveNode_FullMethodName || f["code"] != "PermissionDenied" || f["caller"] == "" {
		t.Fatalf("audit record = %v", f)
	}
}

// A curator that believes it leads but whose leadership etcd no longer
// holds (cut off, or its key gone) refuses to answer from its stale view.
func TestDeposedLeaderRefusesReads(t *testing.T) {
	c := newTestCluster(t)
	// GetRegisterTicket is a read only the leader serves (SERVE_LEADER).
	mgmt := cpb.NewManagementServiceClient(c.asOwner())
	if _, err := mgmt.GetRegisterTicket(ctxT(t), &cpb.GetRegisterTicketRequest{}); err != nil {
		t.Fatalf("GetRegisterTicket while leading: %v", err)
	}
	// Delete the leader's election key behind its back: it still thinks
	// it leads (its lease is alive), but etcd says otherwise.
	if _, err := c.etcd.Delete(ctxT(t), electionPrefix+"/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	_, err := mgmt.GetRegisterTicket(ctxT(t), &cpb.GetRegisterTicketRequest{})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("GetRegisterTicket from a deposed leader: %v, want Unavailable", err)
	}
}

// A stopping curator closes the connections still in their TLS handshake,
// such as a follower's held connection (deadleader.go), which says
// nothing: grpc's Stop alone waits for them until the handshake times out
// (two minutes, beyond the test's wait), and the curator's run, and its
// node's stop, with it.
func TestStopClosesSilentConnections(t *testing.T) {
	c := newTestCluster(t)
	silent, err := net.Dial("tcp", c.status.Address.String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	// A call served shows the server accepting connections; the silent
	// one was made before it.
	if _, err := cpb.NewCuratorServiceClient(c.anonymous()).GetLeader(ctxT(t), &cpb.GetLeaderRequest{}); err != nil {
		t.Fatalf("GetLeader: %v", err)
	}
	c.stopCurator()
	if _, err := event.Get(ctxT(t), c.curator.Status(), event.Filter(func(s *Status) bool { return s == nil })); err != nil {
		t.Fatalf("the curator's run did not end with a silent connection open: %v", err)
	}
	if err := silent.SetReadDeadline(time.Now().Add(waitTimeout)); err != nil {
		t.Fatal(err)
	}
	if _, err := silent.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the silent connection after the stop: read %v, want it closed", err)
	}
}
