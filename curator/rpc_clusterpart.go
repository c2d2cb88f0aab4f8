package curator

import (
	"context"
	"crypto/rand"
	"errors"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/identity"
)

// A node's cluster part is the half of its data disk's key-encryption key
// the cluster keeps (node/diskseal): 32 random bytes under
// clusterPartPrefix, beside the node's record and never in it, since every
// node may Watch every record. The leader makes it the first time the
// node asks, in one transaction that also checks the record is the UP
// record it read (its revision), so a node decommissioned meanwhile gets
// none; DeleteNode deletes it with the record. It never changes: a disk
// bound to it opens only with it.
//
// Only the node itself gets it, by proving its key; a node that is not
// UP is refused with a reason it can tell apart (IsNodeNotFound,
// IsNodeDecommissioned), so that its console says what happened to it
// rather than "the cluster cannot be reached".

// clusterPartPrefix holds one cluster part per node, under its node ID.
const clusterPartPrefix = "clusterparts/"

// clusterPartSize is the size of a cluster part (diskseal.PartSize).
const clusterPartSize = 32

func clusterPartKey(id string) string { return clusterPartPrefix + id }

// reasonNodeNotFound marks the refusal of a key that is no node's.
const reasonNodeNotFound = "NODE_NOT_FOUND"

// errNodeNotFound is the refusal of a key that belongs to no node.
func errNodeNotFound(id string) error {
	st := status.Newf(codes.NotFound, "node %s is not part of the cluster (deleted, or never registered)", id)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reasonNodeNotFound, Domain: errorDomain, Metadata: map[string]string{"node_id": id}}); err == nil {
		st = d
	}
	return st.Err()
}

// IsNodeNotFound reports whether err (or an error it wraps) is a curator's
// refusal of a call because the caller's key is no node's: it was deleted,
// or never registered.
func IsNodeNotFound(err error) bool {
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) {
		return false
	}
	st := se.GRPCStatus()
	if st.Code() != codes.NotFound {
		return false
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == errorDomain && info.Reason == reasonNodeNotFound {
			return true
		}
	}
	return false
}

func (r *rpcServer) GetClusterPart(ctx context.Context, _ *cpb.GetClusterPartRequest) (*cpb.GetClusterPartResponse, error) {
	id := identity.NodeID(callerFrom(ctx).PublicKey)
	l := leaderFrom(ctx)
	for {
		// Read from etcd, not the node cache: a node decommissioned a
		// moment ago must not get its part from a stale view.
		n, rev, err := getNode(ctx, r.s.cfg.Client, id)
		if err != nil {
			return nil, leaderWriteError(err)
		}
		switch {
		case n == nil:
			retired, err := r.s.cfg.Client.Get(ctx, retiredKey(id), clientv3.WithCountOnly())
			if err != nil {
				return nil, leaderWriteError(err)
			}
			if retired.Count > 0 {
				return nil, errNodeDecommissioned(id)
			}
			return nil, errNodeNotFound(id)
		case n.State == cpb.NodeState_NODE_STATE_DECOMMISSIONED:
			return nil, errNodeDecommissioned(id)
		case n.State != cpb.NodeState_NODE_STATE_UP:
			return nil, status.Errorf(codes.FailedPrecondition, "node %s is %v: only an UP node has a cluster part", id, n.State)
		}
		// One transaction: the record is still the UP one read above;
		// then the part is read, or made if there is none yet.
		part := make([]byte, clusterPartSize)
		rand.Read(part)
		key := clusterPartKey(id)
		unchanged := clientv3.Compare(clientv3.ModRevision(nodeKey(id)), "=", rev)
		resp, ok, err := l.leadership.Txn(ctx, []clientv3.Cmp{unchanged}, []clientv3.Op{
			clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)},
				[]clientv3.Op{clientv3.OpPut(key, string(part))},
				[]clientv3.Op{clientv3.OpGet(key)},
			),
		}, nil)
		if err != nil {
			return nil, leaderWriteError(err)
		}
		if !ok {
			continue // the record changed: judge it again
		}
		inner := resp.Responses[0].GetResponseTxn()
		if inner.Succeeded {
			return &cpb.GetClusterPartResponse{ClusterPart: part}, nil
		}
		kvs := inner.Responses[0].GetResponseRange().GetKvs()
		if len(kvs) != 1 || len(kvs[0].Value) != clusterPartSize {
			return nil, status.Errorf(codes.Internal, "node %s: the stored cluster part is damaged (not %d bytes)", id, clusterPartSize)
		}
		return &cpb.GetClusterPartResponse{ClusterPart: kvs[0].Value}, nil
	}
}
