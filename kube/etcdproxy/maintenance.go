package etcdproxy

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// maintenanceServer answers Status, which tells the apiserver etcd's
// version (it enables watch progress requests by version) and database
// size. Every other maintenance call acts on or reveals the whole database
// and is left Unimplemented.
type maintenanceServer struct {
	pb.UnimplementedMaintenanceServer

	upstream pb.MaintenanceClient
}

func (s *maintenanceServer) Status(ctx context.Context, r *pb.StatusRequest) (*pb.StatusResponse, error) {
	return s.upstream.Status(ctx, r)
}
