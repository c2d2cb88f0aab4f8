package curator

import (
	"context"
	"crypto/ed25519"
	"crypto/subtle"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cpb "github.com/polis-os/polis/api/curator/v1"
)

// AAAService: turning the owner key into an owner certificate.

// TakeOwnership issues the owner certificate to whoever proved, in the TLS
// handshake, that it holds the owner key stored at bootstrap. Any caller
// that holds a key reaches this handler (a key holder, a node, a user): the
// key is what counts, not the kind of certificate that proved it.
func (r *rpcServer) TakeOwnership(ctx context.Context, _ *cpb.TakeOwnershipRequest) (*cpb.TakeOwnershipResponse, error) {
	caller := callerFrom(ctx)
	l := leaderFrom(ctx)
	resp, err := r.s.cfg.Client.Get(ctx, ownerKey)
	if err != nil {
		return nil, leaderWriteError(fmt.Errorf("reading the owner key: %w", err))
	}
	if len(resp.Kvs) != 1 || len(resp.Kvs[0].Value) != ed25519.PublicKeySize {
		return nil, status.Error(codes.Internal, "the cluster state holds no valid owner key")
	}
	// Constant time, out of habit: the stored key is public, but nothing is
	// gained by telling a prober how much of its key matched.
	if subtle.ConstantTimeCompare(caller.PublicKey, resp.Kvs[0].Value) != 1 {
		return nil, status.Errorf(codes.PermissionDenied, "%s does not hold the owner key", caller)
	}
	cert, err := l.ca.IssueUser(OwnerUserName, caller.PublicKey, r.s.cfg.Now())
	if err != nil {
		return nil, status.Errorf(codes.Internal, "issuing the owner certificate: %v", err)
	}
	dir, err := r.clusterDirectory(ctx)
	if err != nil {
		return nil, err
	}
	return &cpb.TakeOwnershipResponse{OwnerCertificate: cert.Raw, ClusterDirectory: dir}, nil
}
