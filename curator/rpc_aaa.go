package curator

import (
	"context"
	"crypto/ed25519"
	"crypto/subtle"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/identity"
)

// AAAService: turning the owner key into an owner certificate, and
// replacing the owner key, which revokes every certificate of the old one
// (see checkUserStanding).

// TakeOwnership issues the owner certificate to whoever proved, in the TLS
// handshake, that it holds the owner key stored at bootstrap. Any caller
// that holds a key reaches this handler (a key holder, a node, a user): the
// key is what counts, not the kind of certificate that proved it.
func (r *rpcServer) TakeOwnership(ctx context.Context, _ *cpb.TakeOwnershipRequest) (*cpb.TakeOwnershipResponse, error) {
	caller := callerFrom(ctx)
	l := leaderFrom(ctx)
	owner, err := r.s.ownerKey(ctx)
	if err != nil {
		return nil, err
	}
	// Constant time, out of habit: the stored key is public, but nothing is
	// gained by telling a prober how much of its key matched.
	if subtle.ConstantTimeCompare(caller.PublicKey, owner) != 1 {
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

// RotateOwnerKey replaces the owner key, with compare-and-swap on the key
// the caller proved, so that two rotations cannot both succeed from the
// same key. The caller's own certificate stops working with it: it gets
// one for the new key in the response.
func (r *rpcServer) RotateOwnerKey(ctx context.Context, req *cpb.RotateOwnerKeyRequest) (*cpb.RotateOwnerKeyResponse, error) {
	caller := callerFrom(ctx)
	l := leaderFrom(ctx)
	if caller.Kind != identity.KindUser || caller.UserName != OwnerUserName {
		return nil, status.Errorf(codes.PermissionDenied, "%s is not the owner", caller)
	}
	if len(req.NewOwnerKey) != ed25519.PublicKeySize {
		return nil, status.Errorf(codes.InvalidArgument, "new_owner_key is %d bytes, want an ed25519 public key of %d", len(req.NewOwnerKey), ed25519.PublicKeySize)
	}
	newKey := ed25519.PublicKey(req.NewOwnerKey)
	if newKey.Equal(caller.PublicKey) {
		return nil, status.Error(codes.InvalidArgument, "new_owner_key is the current owner key")
	}
	msg := cpb.OwnerKeyRotationMessage(l.ca.Certificate().Raw, caller.PublicKey)
	if !ed25519.Verify(newKey, msg, req.NewOwnerKeySignature) {
		return nil, status.Error(codes.InvalidArgument, "new_owner_key_signature is not the new key's signature of the rotation message (see curatorv1.OwnerKeyRotationMessage)")
	}
	current := clientv3.Compare(clientv3.Value(ownerKey), "=", string(caller.PublicKey))
	_, ok, err := l.leadership.Txn(ctx, []clientv3.Cmp{current}, []clientv3.Op{clientv3.OpPut(ownerKey, string(newKey))}, nil)
	if err != nil {
		return nil, leaderWriteError(fmt.Errorf("storing the new owner key: %w", err))
	}
	if !ok {
		return nil, status.Error(codes.PermissionDenied, "the owner key changed during the call: this certificate is no longer the owner's")
	}
	cert, err := l.ca.IssueUser(OwnerUserName, newKey, r.s.cfg.Now())
	if err != nil {
		return nil, status.Errorf(codes.Internal, "issuing the owner certificate for the new key: %v", err)
	}
	return &cpb.RotateOwnerKeyResponse{OwnerCertificate: cert.Raw}, nil
}
