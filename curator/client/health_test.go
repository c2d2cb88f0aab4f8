package client

import (
	"fmt"
	"testing"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/internal/testutil"
)

// The curators' standard health service, through the stock client: the
// overall status SERVING on every curator, the Management service
// SERVING on the leader alone, and that moves with the leadership when the
// leader stops. Reflection lists the services without the .proto files.
func TestHealthFollowsLeadership(t *testing.T) {
	c := newHACluster(t, 3)
	mgmt := cpb.ManagementService_ServiceDesc.ServiceName
	// check asks one curator, directly, for a service's status.
	check := func(nd *haNode, service string) (healthpb.HealthCheckResponse_ServingStatus, error) {
		resp, err := healthpb.NewHealthClient(c.direct(nd)).Check(ctxT(t), &healthpb.HealthCheckRequest{Service: service})
		return resp.GetStatus(), err
	}
	// onlyLeaderServes waits until l alone among the running curators
	// says SERVING for the Management service, and all of them overall.
	onlyLeaderServes := func(l *haNode) {
		t.Helper()
		testutil.Eventually(t, waitTimeout, "health following the leadership", func() error {
			for _, nd := range c.nodes {
				if nd.curator == nil {
					continue
				}
				overall, err := check(nd, "")
				if err != nil || overall != healthpb.HealthCheckResponse_SERVING {
					return fmt.Errorf("%s overall: %v %v", nd.id, overall, err)
				}
				st, err := check(nd, mgmt)
				want := healthpb.HealthCheckResponse_NOT_SERVING
				if nd == l {
					want = healthpb.HealthCheckResponse_SERVING
				}
				if err != nil || st != want {
					return fmt.Errorf("%s (leader %s): %s is %v (%v), want %v", nd.id, l.id, mgmt, st, err, want)
				}
			}
			return nil
		})
	}
	old := c.leader()
	onlyLeaderServes(old)

	c.stopCurator(old)
	l := c.leader()
	if l == old {
		t.Fatal("the stopped curator still leads")
	}
	onlyLeaderServes(l)

	// Reflection answers anyone, and names the curator's services.
	stream, err := reflectionpb.NewServerReflectionClient(c.direct(l)).ServerReflectionInfo(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range resp.GetListServicesResponse().GetService() {
		found = found || s.Name == mgmt
	}
	if !found {
		t.Errorf("reflection lists %v, without %s", resp.GetListServicesResponse().GetService(), mgmt)
	}
	stream.CloseSend()
}
