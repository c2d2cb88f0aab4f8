package rpcauth

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
)

// RegisterStandard adds the open services to srv: grpc.health.v1, with
// the overall status ("") and each of services set to st at first, and
// server reflection, so that grpcurl lists and calls the services without
// the .proto files. It returns the health server, whose statuses the
// caller keeps true from then on (and sets NOT_SERVING, with Shutdown,
// before it stops).
func RegisterStandard(srv *grpc.Server, st healthpb.HealthCheckResponse_ServingStatus, services ...string) *health.Server {
	hs := health.NewServer()
	hs.SetServingStatus("", st)
	for _, name := range services {
		hs.SetServingStatus(name, st)
	}
	healthpb.RegisterHealthServer(srv, hs)
	reflection.Register(srv)
	return hs
}
