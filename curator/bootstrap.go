package curator

import (
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/identity"
)

// BootstrapParams describe a new cluster and its first node.
type BootstrapParams struct {
	// OwnerKey is the public key of the cluster's owner, who exchanges it
	// for an owner certificate with AAAService.TakeOwnership.
	OwnerKey ed25519.PublicKey
	// NodeKey is the first node's public key.
	NodeKey ed25519.PublicKey
	// NodeStatus is the first node's status, checked as every status the
	// curator stores.
	NodeStatus *cpb.NodeStatus
	// SnapshotPolicy is how every consensus member keeps periodic
	// snapshots; nil means the defaults (consensus.DefaultSnapshotInterval
	// and DefaultSnapshotKeep).
	SnapshotPolicy *cpb.SnapshotPolicy
	// PodNetwork is the cluster's pod range and the size of each
	// Kubernetes node's (worker's or controller's) share of it; nil means the defaults (DefaultPodRange,
	// DefaultNodePodPrefixLength). It is stored with the defaults filled
	// in, so a later change of the defaults leaves the cluster as it is.
	PodNetwork *cpb.PodNetwork
	// Restored says that the store holds a cluster restored from a
	// backup onto this node (consensus.PrepareRestore), which Bootstrap
	// then adds to it as a consensus member (see restore.go) instead of
	// creating a cluster: OwnerKey, SnapshotPolicy, PodNetwork and
	// RegisterTicket are the backup's and ignored here.
	Restored bool
	// RegisterTicket is the cluster's first register ticket
	// (CheckRegisterTicket); nil means a new one (NewRegisterTicket).
	RegisterTicket []byte
}

// ErrBootstrapMismatch is returned by Bootstrap when the store already holds
// a cluster bootstrapped with another owner or first node.
var ErrBootstrapMismatch = errors.New("curator: the store holds another cluster")

// Bootstrap initialises the curator's state for a new cluster in an etcd
// namespace that has just been created: the cluster CA, the owner's key, a
// register ticket, and the first node, UP with the ConsensusMember role.
// It returns the first node's certificate. No node holds a Kubernetes role
// until an operator gives one (UpdateNodeRoles; polis-launch --kubernetes
// gives the first node KubernetesController): the role means a running
// Kubernetes control plane, which needs the Kubernetes bundle on the node.
// Nor does any node have a pod range until then: UpdateNodeRoles gives it
// with the role (podnetwork.go).
//
// It is idempotent: run again with the same owner and node (after a crash
// half-way, or when the node's control plane restarts before the node has
// finished enrolling) it completes what is missing and returns a fresh
// certificate, whatever has happened to the cluster since; run with
// another owner or node it refuses with ErrBootstrapMismatch and changes
// nothing. Everything but the CA is
// written in one transaction, so the state is never half-initialised.
func Bootstrap(ctx context.Context, cli *clientv3.Client, p BootstrapParams, now time.Time) (*x509.Certificate, error) {
	if p.Restored {
		return bootstrapRestored(ctx, cli, p, now)
	}
	if len(p.OwnerKey) != ed25519.PublicKeySize || len(p.NodeKey) != ed25519.PublicKeySize {
		return nil, errors.New("bootstrap: owner and node keys must be ed25519 public keys")
	}
	if p.NodeStatus == nil {
		return nil, errors.New("bootstrap: the first node's status is required")
	}
	if err := checkNodeStatus(p.NodeStatus); err != nil {
		return nil, fmt.Errorf("bootstrap: the first node's %w", err)
	}
	if err := CheckSnapshotPolicy(p.SnapshotPolicy); err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	if err := CheckPodNetwork(p.PodNetwork); err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	ticket := p.RegisterTicket
	if ticket == nil {
		var err error
		if ticket, err = NewRegisterTicket(); err != nil {
			return nil, fmt.Errorf("bootstrap: %w", err)
		}
	} else if err := CheckRegisterTicket(ticket); err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	pods, err := proto.Marshal(withPodNetworkDefaults(p.PodNetwork))
	if err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	ops := []clientv3.Op{clientv3.OpPut(podNetworkKey, string(pods))}
	if p.SnapshotPolicy != nil {
		policy, err := proto.Marshal(p.SnapshotPolicy)
		if err != nil {
			return nil, fmt.Errorf("bootstrap: %w", err)
		}
		ops = append(ops, clientv3.OpPut(snapshotPolicyKey, string(policy)))
	}
	ca, _, err := identity.EnsureCA(ctx, cli, now)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	id := identity.NodeID(p.NodeKey)
	op, err := putNodeOp(firstNodeRecord(p.NodeKey, p.NodeStatus))
	if err != nil {
		return nil, err
	}
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(ownerKey), "=", 0)).
		Then(append([]clientv3.Op{clientv3.OpPut(ownerKey, string(p.OwnerKey)), clientv3.OpPut(ticketKey, string(ticket)), op}, ops...)...).
		Else(clientv3.OpGet(ownerKey), clientv3.OpGet(nodeKey(id))).
		Commit()
	if err != nil {
		return nil, fmt.Errorf("bootstrap: writing the cluster state: %w", err)
	}
	if !resp.Succeeded {
		owner := resp.Responses[0].GetResponseRange().Kvs
		nodes := resp.Responses[1].GetResponseRange().Kvs
		if len(owner) != 1 || !p.OwnerKey.Equal(ed25519.PublicKey(owner[0].Value)) || len(nodes) != 1 {
			return nil, ErrBootstrapMismatch
		}
		same, err := sameNode(nodes[0].Key, nodes[0].Value, p.NodeKey)
		if err != nil {
			return nil, fmt.Errorf("bootstrap: %w", err)
		}
		if !same {
			return nil, fmt.Errorf("%w: the first node has another key", ErrBootstrapMismatch)
		}
	}
	cert, err := ca.IssueNode(p.NodeKey, now)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: issuing the first node's certificate: %w", err)
	}
	return cert, nil
}

// firstNodeRecord is the record of the node a cluster is bootstrapped on,
// or restored onto (restore.go): UP, with ConsensusMember, and its status.
func firstNodeRecord(key ed25519.PublicKey, st *cpb.NodeStatus) *cpb.Node {
	return &cpb.Node{
		Id:        identity.NodeID(key),
		PublicKey: key,
		State:     cpb.NodeState_NODE_STATE_UP,
		Roles:     &cpb.Roles{ConsensusMember: &cpb.ConsensusMemberRole{}},
		Status:    st,
	}
}

// sameNode reports whether the stored record (key, value) found by a run
// of Bootstrap again (of a new or a restored cluster) is of the node with
// public key. The record may have changed since the first run (roles
// given, status pushed): what must hold is that it is the same node.
func sameNode(key, value []byte, public ed25519.PublicKey) (bool, error) {
	existing, err := decodeNode(key, value)
	if err != nil {
		return false, err
	}
	return public.Equal(ed25519.PublicKey(existing.PublicKey)), nil
}
