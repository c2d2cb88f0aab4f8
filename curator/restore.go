package curator

import (
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/polis-os/polis/identity"
)

// A cluster restored from a backup onto a new machine
// (consensus.PrepareRestore) has all the curator's state of the old
// cluster, but not the node it now runs on: that node has a key of its
// own, which the backup never held. bootstrapRestored adds it, as
// Bootstrap adds the first node of a new cluster: UP, with
// ConsensusMember, its certificate issued by the cluster CA from the
// backup. The old consensus members are dropped afterwards by the
// recovery's follow-up (recovery.go), since consensus records the restore
// as a recovery.

// ErrNotRestored is returned by Bootstrap with BootstrapParams.Restored
// when the store holds no cluster to add the node to.
var ErrNotRestored = errors.New("curator: the store holds no cluster: nothing was restored into it")

// bootstrapRestored is Bootstrap for BootstrapParams.Restored. It is
// idempotent like Bootstrap: the node's record is written once, in one
// transaction that also checks that the store holds a cluster, and later
// runs leave whatever happened to the record since.
func bootstrapRestored(ctx context.Context, cli *clientv3.Client, p BootstrapParams, now time.Time) (*x509.Certificate, error) {
	if len(p.NodeKey) != ed25519.PublicKeySize {
		return nil, errors.New("restore: the node key must be an ed25519 public key")
	}
	if p.NodeStatus == nil {
		return nil, errors.New("restore: the node's status is required")
	}
	if err := checkNodeStatus(p.NodeStatus); err != nil {
		return nil, fmt.Errorf("restore: the node's %w", err)
	}
	ca, err := identity.LoadCA(ctx, cli)
	if errors.Is(err, identity.ErrNoCA) {
		return nil, ErrNotRestored
	}
	if err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	id := identity.NodeID(p.NodeKey)
	op, err := putNodeOp(firstNodeRecord(p.NodeKey, p.NodeStatus))
	if err != nil {
		return nil, err
	}
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(ownerKey), ">", 0), clientv3.Compare(clientv3.CreateRevision(nodeKey(id)), "=", 0)).
		Then(op).
		Else(clientv3.OpGet(ownerKey, clientv3.WithCountOnly()), clientv3.OpGet(nodeKey(id))).
		Commit()
	if err != nil {
		return nil, fmt.Errorf("restore: writing the node's record: %w", err)
	}
	if !resp.Succeeded {
		if resp.Responses[0].GetResponseRange().Count == 0 {
			return nil, ErrNotRestored
		}
		kvs := resp.Responses[1].GetResponseRange().Kvs
		same, err := sameNode(kvs[0].Key, kvs[0].Value, p.NodeKey)
		if err != nil {
			return nil, fmt.Errorf("restore: %w", err)
		}
		if !same {
			return nil, fmt.Errorf("restore: the store's record of %s has another key", id)
		}
	}
	cert, err := ca.IssueNode(p.NodeKey, now)
	if err != nil {
		return nil, fmt.Errorf("restore: issuing the node's certificate: %w", err)
	}
	return cert, nil
}
