package curator

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
)

// CuratorService: the calls nodes make.

func (r *rpcServer) GetLeader(ctx context.Context, _ *cpb.GetLeaderRequest) (*cpb.GetLeaderResponse, error) {
	st := r.s.election.Current()
	if st.Leader == nil {
		return nil, status.Error(codes.Unavailable, "no leader is known (an election is under way)")
	}
	var leader cpb.CuratorEndpoint
	if err := proto.Unmarshal(st.Leader, &leader); err != nil {
		return nil, status.Errorf(codes.Internal, "the leader's election entry is corrupt: %v", err)
	}
	return &cpb.GetLeaderResponse{Leader: &leader, Responder: r.self}, nil
}

func (r *rpcServer) GetCACertificate(ctx context.Context, _ *cpb.GetCACertificateRequest) (*cpb.GetCACertificateResponse, error) {
	return &cpb.GetCACertificateResponse{CaCertificate: r.ca.Certificate().Raw}, nil
}
