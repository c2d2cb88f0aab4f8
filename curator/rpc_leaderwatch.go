package curator

import (
	"bytes"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
)

// WatchLeader streams this curator's view of the leadership (the
// election's Status value): its current view first, then each change, as
// soon as the election observer sees it. Clients hold one open so that
// they move to a new leader the moment it is elected rather than when
// their next GetLeader poll would have asked (curator/client).
//
// Only changes of who leads are sent: the value also changes when this
// curator's own term starts or ends, which the leader's endpoint already
// says. Like GetLeader it reads nothing stored and needs no fence.
func (r *rpcServer) WatchLeader(_ *cpb.WatchLeaderRequest, stream cpb.CuratorService_WatchLeaderServer) error {
	ctx := stream.Context()
	w := r.s.election.Status().Watch()
	defer w.Close()
	var sent []byte
	first := true
	for {
		st, err := w.Get(ctx)
		if err != nil {
			return status.FromContextError(err).Err()
		}
		leader := st.Leader
		if !first && bytes.Equal(leader, sent) {
			continue
		}
		resp := &cpb.WatchLeaderResponse{Responder: r.self}
		if leader != nil {
			var ep cpb.CuratorEndpoint
			if err := proto.Unmarshal(leader, &ep); err != nil {
				return status.Errorf(codes.Internal, "the leader's election entry is corrupt: %v", err)
			}
			resp.Leader = &ep
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
		sent, first = leader, false
	}
}
