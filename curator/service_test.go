package curator

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cpb "github.com/polis-os/polis/api/curator/v1"
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
