package curator

import (
	"context"
	"errors"
	"sync/atomic"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/internal/rpcauth"
)

// A leader serves a call only after two checks with etcd: that it still
// leads (Leadership.Confirm) and, for the owner, that the owner's
// certificate is for the current owner key (checkUserStanding); a change
// to a node record then reads the record and writes it. That is four
// round trips through raft before the one write, and under load each
// costs what the write costs. For the methods in confirmedByWrite the
// checks travel with the write instead, as conditions of its transaction:
//
//   - the leadership: every leader write is guarded by it already
//     (Leadership.Txn), so a deposed leader's write fails whatever it
//     planned from;
//   - the owner's standing: the owner key must still be the caller's, a
//     condition on its key;
//   - the record: the change is planned from the leader's node cache and
//     written only if the record's mod revision is still the one the cache
//     holds, so a cache behind etcd costs a retry from a fresh read, never
//     a lost update.
//
// One transaction then confirms all three and makes the change. A call
// that writes nothing (the roles asked for are the roles held) ends with
// the same conditions in a read-only transaction, and a refusal (the
// node is not UP, say) is never answered from the cache: it is planned
// again from a read made in a transaction with the same conditions, so
// a caller who no longer stands learns nothing, and a refusal is always
// about the record as etcd holds it. A handler that must act before it
// writes (a consensus member added to etcd, UpdateNodeRoles) confirms
// first (deferredChecks.confirm), as every other method does.

// confirmedByWrite are the SERVE_LEADER methods whose handlers confirm the
// leadership and the caller's standing with their write (see above).
var confirmedByWrite = map[string]bool{
	cpb.ManagementService_UpdateNodeRoles_FullMethodName: true,
}

// deferredChecks are the checks authorize left to a confirmedByWrite
// handler.
type deferredChecks struct {
	s      *Service
	leader *Leadership
	caller identity.Identity
	// standing are the conditions under which the caller still stands
	// (the owner key is still the caller's key); none for callers whose
	// standing authorize checked.
	standing []clientv3.Cmp
	// confirmed is set once confirm has checked everything.
	confirmed atomic.Bool
}

type deferredKey struct{}

// deferredFrom returns the checks authorize deferred for this call; nil
// for the methods not in confirmedByWrite.
func deferredFrom(ctx context.Context) *deferredChecks {
	d, _ := ctx.Value(deferredKey{}).(*deferredChecks)
	return d
}

// deferChecks is authorize's step for a confirmedByWrite method: what it
// can check without etcd it checks now (a user must be the owner), the
// rest goes into the context.
func (s *Service) deferChecks(ctx context.Context, req cpb.Requirement, caller identity.Identity, l *leaderState) (context.Context, error) {
	d := &deferredChecks{s: s, leader: l.leadership, caller: caller}
	if req.Caller == cpb.Caller_CALLER_USER {
		if caller.Kind != identity.KindUser || caller.UserName != rpcauth.OwnerUserName {
			return nil, status.Errorf(codes.PermissionDenied, "%s is not the owner", caller)
		}
		d.standing = []clientv3.Cmp{clientv3.Compare(clientv3.Value(ownerKey), "=", string(caller.PublicKey))}
	}
	return context.WithValue(ctx, deferredKey{}, d), nil
}

// confirm makes the checks now, as authorize makes them for every other
// method: for a handler that acts before its write.
func (d *deferredChecks) confirm(ctx context.Context) error {
	if err := d.leader.Confirm(ctx); err != nil {
		if errors.Is(err, ErrNotLeader) {
			return d.s.notLeader()
		}
		return status.Errorf(codes.Unavailable, "confirming the leadership with etcd: %v", err)
	}
	if len(d.standing) > 0 {
		if err := d.s.checkUserStanding(ctx, d.caller); err != nil {
			return err
		}
	}
	d.confirmed.Store(true)
	return nil
}

// errStandingLost is what txn returns when the caller no longer stands.
var errStandingLost = errors.New("the caller's standing changed")

// txn runs a leader transaction that also holds only while the caller
// stands: ErrNotLeader if the leadership is lost, errStandingLost if the
// standing is, otherwise whether cmps held and then was applied. The
// three are nested so that one round trip tells them apart.
func (d *deferredChecks) txn(ctx context.Context, cmps []clientv3.Cmp, then []clientv3.Op) (*clientv3.TxnResponse, bool, error) {
	standing := d.standing
	if d.confirmed.Load() {
		standing = nil
	}
	if len(standing) == 0 {
		return d.leader.Txn(ctx, cmps, then, nil)
	}
	inner := clientv3.OpTxn(cmps, then, nil)
	resp, _, err := d.leader.Txn(ctx, standing, []clientv3.Op{inner}, nil)
	if err != nil {
		return nil, false, err
	}
	if !resp.Succeeded {
		return nil, false, errStandingLost
	}
	in := resp.Responses[0].GetResponseTxn()
	return (*clientv3.TxnResponse)(in), in.Succeeded, nil
}

// changeNodeConfirmed is changeNodeTxn for a confirmedByWrite handler:
// change is planned from the node cache and written with the deferred
// checks and a compare on the record's revision, one round trip when the
// cache holds the current record; otherwise (or when change refuses) from
// a read made under the same checks. Errors are changeNodeTxn's, and
// PERMISSION_DENIED when the caller no longer stands.
func (r *rpcServer) changeNodeConfirmed(ctx context.Context, id string, change func(n *cpb.Node) (*cpb.Node, []clientv3.Cmp, []clientv3.Op, error)) (*cpb.Node, error) {
	d := deferredFrom(ctx)
	if d == nil {
		// Not a confirmedByWrite method: authorize checked everything.
		return r.changeNodeTxn(ctx, id, change)
	}
	return r.handleNodeChange(id, d, func(change nodeChange) (*cpb.Node, error) {
		return d.updateNode(ctx, r.s.nodes, id, change)
	}, change)
}

// updateNode is updateNodeTxn with the deferred checks (see above): first
// from the cache, then from reads under the checks until a write's
// compares hold.
func (d *deferredChecks) updateNode(ctx context.Context, nodes *nodeCache, id string, change func(n *cpb.Node) (*cpb.Node, []clientv3.Cmp, []clientv3.Op, error)) (*cpb.Node, error) {
	if snap, err := nodes.current(ctx); err == nil {
		if cur, rev := snap.nodes[id], snap.revisionOf(id); cur != nil && rev > 0 {
			next, cmps, ops, err := change(proto.Clone(cur).(*cpb.Node))
			if err == nil {
				done, err := d.write(ctx, id, cur, rev, next, cmps, ops)
				switch {
				case err != nil:
					return nil, err
				case done && next == nil:
					return cur, nil
				case done:
					return next, nil
				}
			}
			// A refusal, or a record that moved on: from etcd.
		}
	}
	// The read is made under the checks, so a change that writes nothing
	// is answered from it.
	return retryNodeChange(ctx, id, d.read, d.write, change)
}

// write stores next over cur, read at rev, with the deferred checks; done
// is false when the record or cmps moved on. When there is nothing to
// write (next is nil, or cur with nothing else to write), the transaction
// only checks.
func (d *deferredChecks) write(ctx context.Context, id string, cur *cpb.Node, rev int64, next *cpb.Node, cmps []clientv3.Cmp, ops []clientv3.Op) (done bool, err error) {
	cmps, ops, err = nodeWrite(id, cur, rev, next, cmps, ops)
	if err != nil {
		return false, err
	}
	_, ok, err := d.txn(ctx, cmps, ops)
	return ok, err
}

// read reads node id's record in a transaction under the deferred checks:
// (nil, 0) for a missing record.
func (d *deferredChecks) read(ctx context.Context, id string) (*cpb.Node, int64, error) {
	resp, _, err := d.txn(ctx, nil, []clientv3.Op{clientv3.OpGet(nodeKey(id))})
	if err != nil {
		return nil, 0, err
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return nil, 0, nil
	}
	n, err := decodeNode(kvs[0].Key, kvs[0].Value)
	if err != nil {
		return nil, 0, err
	}
	return n, kvs[0].ModRevision, nil
}
