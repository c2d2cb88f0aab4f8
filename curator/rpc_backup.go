package curator

import (
	"errors"
	"io"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	cpb "github.com/polis-os/polis/api/curator/v1"
)

// backupChunk is the most snapshot bytes one BackupClusterResponse
// carries: well under gRPC's 4 MiB message limit, large enough that a
// snapshot of a big cluster goes in few messages.
const backupChunk = 256 << 10

// BackupCluster streams a snapshot of this curator's consensus member.
// The call was fenced (authorize) on a quorum read through that member, so
// the member has applied every write acknowledged before the call and the
// snapshot holds them all.
func (r *rpcServer) BackupCluster(_ *cpb.BackupClusterRequest, stream grpc.ServerStreamingServer[cpb.BackupClusterResponse]) error {
	ctx := stream.Context()
	// The permission is the owner's alone (rpcauth.UserHolds); say so here too,
	// as IssueKubernetesCredentials does: a backup holds the CA's key.
	if caller := callerFrom(ctx); caller.UserName != OwnerUserName {
		return status.Errorf(codes.PermissionDenied, "%s is not the owner", caller)
	}
	st, err := r.consensusStatus(ctx)
	if err != nil {
		return err
	}
	start := r.s.cfg.Now()
	began := time.Now()
	snap, err := st.Snapshot(ctx)
	if err != nil {
		return status.Errorf(codes.Unavailable, "%v", err)
	}
	defer snap.Data.Close()
	first := &cpb.BackupClusterResponse{Info: &cpb.BackupInfo{
		TakenAt:     timestamppb.New(start),
		NodeId:      r.s.nodeID,
		Revision:    snap.Revision,
		EtcdVersion: snap.EtcdVersion,
	}}
	var total int64
	for msg := first; ; msg = (&cpb.BackupClusterResponse{}) {
		// A buffer per message: gRPC may still read a sent message.
		buf := make([]byte, backupChunk)
		n, err := io.ReadFull(snap.Data, buf)
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			return status.Errorf(codes.Unavailable, "reading the etcd snapshot: %v", err)
		}
		if n > 0 || msg == first {
			msg.Chunk = buf[:n]
			if err := stream.Send(msg); err != nil {
				return err
			}
			total += int64(n)
		}
		if n < len(buf) {
			break
		}
	}
	r.s.rpcLogger().Info("backup taken",
		zap.Int64("revision", snap.Revision),
		zap.Int64("bytes", total),
		zap.Duration("took", time.Since(began)),
	)
	return nil
}
