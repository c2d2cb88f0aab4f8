package curator

import (
	"context"
	"errors"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
)

// The curator's keys in its etcd namespace. The CA lives under
// identity.CAPrefix; the election under electionPrefix.
const (
	// nodePrefix holds one record per node, a cpb.Node in protobuf wire
	// format, under its node ID. Health and time since heartbeat are never
	// stored: they are the leader's judgement at the time of asking.
	nodePrefix = "nodes/"
	// ownerKey holds the raw ed25519 public key of the cluster's owner.
	ownerKey = "cluster/owner"
	// ticketKey holds the cluster's register ticket (32 random bytes).
	ticketKey = "cluster/register-ticket"
	// retiredPrefix holds, under the node ID, the public key of every
	// node that was decommissioned and then deleted: such a key never
	// registers again (see registration.go).
	retiredPrefix = "retired/"
	// recoveryKey holds the cluster's last recovery after quorum loss, a
	// cpb.ClusterRecovery, once the lost members are dropped (recovery.go).
	recoveryKey = "cluster/recovery"
	// snapshotPolicyKey holds the cluster's cpb.SnapshotPolicy as given at
	// bootstrap; absent, the defaults apply (snapshotpolicy.go).
	snapshotPolicyKey = "cluster/snapshot-policy"
)

func retiredKey(id string) string { return retiredPrefix + id }

func nodeKey(id string) string { return nodePrefix + id }

// nodeIDFromKey is the inverse of nodeKey.
func nodeIDFromKey(key string) (string, bool) {
	return strings.CutPrefix(key, nodePrefix)
}

// decodeNode parses a stored node record and checks that it is the record
// of the node its key names and passes checkNodeRecord: a record that
// fails is corrupt, and refusing it is better than serving it.
func decodeNode(key, value []byte) (*cpb.Node, error) {
	id, ok := nodeIDFromKey(string(key))
	if !ok {
		return nil, fmt.Errorf("key %q is not a node record", key)
	}
	if value == nil {
		return nil, nil // deleted
	}
	if len(value) > maxNodeRecordSize {
		return nil, fmt.Errorf("node record %s: %d bytes, more than the %d allowed", id, len(value), maxNodeRecordSize)
	}
	var n cpb.Node
	if err := proto.Unmarshal(value, &n); err != nil {
		return nil, fmt.Errorf("node record %s: %w", id, err)
	}
	if n.Id != id {
		return nil, fmt.Errorf("node record %s: holds node %q", id, n.Id)
	}
	if err := checkNodeRecord(&n); err != nil {
		return nil, err
	}
	return &n, nil
}

// getNode reads one node record. A missing node is (nil, 0, nil); rev is
// the record's mod revision, for compare-and-swap updates.
func getNode(ctx context.Context, kv clientv3.KV, id string) (n *cpb.Node, rev int64, err error) {
	resp, err := kv.Get(ctx, nodeKey(id))
	if err != nil {
		return nil, 0, fmt.Errorf("reading node %s: %w", id, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, nil
	}
	kv0 := resp.Kvs[0]
	n, err = decodeNode(kv0.Key, kv0.Value)
	if err != nil {
		return nil, 0, err
	}
	return n, kv0.ModRevision, nil
}

// errInvalidRecord is what encodeNode wraps when it refuses to store a
// record that fails checkNodeRecord.
var errInvalidRecord = errors.New("refusing to store an invalid record")

// encodeNode serialises a record for storage, without the fields that are
// never stored, after checking it (checkNodeRecord): nothing unchecked is
// ever written.
func encodeNode(n *cpb.Node) (string, error) {
	stored := proto.Clone(n).(*cpb.Node)
	stored.Health = cpb.NodeHealth_NODE_HEALTH_UNSPECIFIED
	stored.TimeSinceHeartbeat = nil
	if err := checkNodeRecord(stored); err != nil {
		return "", fmt.Errorf("%w: node %s: %w", errInvalidRecord, n.Id, err)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(stored)
	if err != nil {
		return "", fmt.Errorf("encoding node %s: %w", n.Id, err)
	}
	return string(b), nil
}

// putNodeOp is the etcd operation storing n.
func putNodeOp(n *cpb.Node) (clientv3.Op, error) {
	v, err := encodeNode(n)
	if err != nil {
		return clientv3.Op{}, err
	}
	return clientv3.OpPut(nodeKey(n.Id), v), nil
}

// updateNode applies change to node id's record as the leader, with
// compare-and-swap on its revision so that concurrent updates of one record
// never lose each other's changes: on a conflict it reads again and
// re-applies change. change returns the error to give the caller when the
// update is not allowed (then nothing is written). A missing node is
// reported to change as nil.
func updateNode(ctx context.Context, l *Leadership, kv clientv3.KV, id string, change func(n *cpb.Node) (*cpb.Node, error)) (*cpb.Node, error) {
	return updateNodeTxn(ctx, l, kv, id, func(n *cpb.Node) (*cpb.Node, []clientv3.Cmp, []clientv3.Op, error) {
		next, err := change(n)
		return next, nil, nil, err
	})
}

// updateNodeTxn is updateNode for a change that writes more than the
// record: change also returns conditions and writes that go into the
// record's transaction (a pod range's key, podnetwork.go). When a
// condition fails, the change is made again from a fresh read, like a
// conflict on the record.
func updateNodeTxn(ctx context.Context, l *Leadership, kv clientv3.KV, id string, change func(n *cpb.Node) (*cpb.Node, []clientv3.Cmp, []clientv3.Op, error)) (*cpb.Node, error) {
	read := func(ctx context.Context, id string) (*cpb.Node, int64, error) { return getNode(ctx, kv, id) }
	write := func(ctx context.Context, id string, cur *cpb.Node, rev int64, next *cpb.Node, cmps []clientv3.Cmp, ops []clientv3.Op) (bool, error) {
		cmps, ops, err := nodeWrite(id, cur, rev, next, cmps, ops)
		if err != nil {
			return false, err
		}
		_, ok, err := l.Txn(ctx, cmps, ops, nil)
		return ok, err
	}
	return retryNodeChange(ctx, id, read, write, change)
}

// retryNodeChange is the compare-and-put loop of every change of a node
// record: change is planned from the record as read returns it (nil for a
// missing node) and written by write over the revision read; when write
// reports that the record or one of change's conditions moved on, it all
// happens again from a fresh read. A change that writes nothing
// (nothingToWrite) returns the record read without calling write. How the
// record is read and the transaction run is the caller's: a plain leader
// transaction (updateNodeTxn), or one under the caller's deferred checks
// (confirmedwrite.go).
func retryNodeChange(ctx context.Context, id string,
	read func(ctx context.Context, id string) (*cpb.Node, int64, error),
	write func(ctx context.Context, id string, cur *cpb.Node, rev int64, next *cpb.Node, cmps []clientv3.Cmp, ops []clientv3.Op) (bool, error),
	change func(n *cpb.Node) (*cpb.Node, []clientv3.Cmp, []clientv3.Op, error),
) (*cpb.Node, error) {
	for {
		cur, rev, err := read(ctx, id)
		if err != nil {
			return nil, err
		}
		var arg *cpb.Node
		if cur != nil {
			arg = proto.Clone(cur).(*cpb.Node)
		}
		next, cmps, ops, err := change(arg)
		if err != nil {
			return nil, err
		}
		if nothingToWrite(cur, next, ops) {
			return cur, nil
		}
		done, err := write(ctx, id, cur, rev, next, cmps, ops)
		if err != nil {
			return nil, err
		}
		if done {
			return next, nil
		}
	}
}

// nothingToWrite reports whether a change planned from cur leaves the
// record as it is and writes nothing beside it: no next, or a next equal
// to cur with no other writes.
func nothingToWrite(cur, next *cpb.Node, ops []clientv3.Op) bool {
	return next == nil || (cur != nil && proto.Equal(cur, next) && len(ops) == 0)
}

// nodeWrite is the transaction that stores next over cur, read at rev:
// cmps with the condition that the record is still at rev, ops with the
// put of next unless there is nothing to write (then the transaction only
// checks).
func nodeWrite(id string, cur *cpb.Node, rev int64, next *cpb.Node, cmps []clientv3.Cmp, ops []clientv3.Op) ([]clientv3.Cmp, []clientv3.Op, error) {
	cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(nodeKey(id)), "=", rev))
	if !nothingToWrite(cur, next, ops) {
		op, err := putNodeOp(next)
		if err != nil {
			return nil, nil, err
		}
		ops = append(ops, op)
	}
	return cmps, ops, nil
}
