// Package curator is the cluster's management service: it keeps every node's
// record in etcd, decides roles, hands out credentials and tells each node
// what it must run. It runs on every ConsensusMember node; one instance leads
// at a time.
//
// # Leadership
//
// Curators elect a leader through etcd (Election): each holds a lease and a
// key under one prefix, and the oldest key leads. Every write the leader makes
// is guarded by its leadership in the same etcd transaction
// (Leadership.Txn): a curator that was deposed while it was still working
// (paused, partitioned, slow) finds its write refused with ErrNotLeader
// instead of overwriting its successor's state. A leader that dies loses the
// leadership when its lease expires (DefaultLeaseTTL); one that stops
// cleanly revokes its lease and hands over at once.
//
// # Management and ownership
//
// ManagementService (rpc_management.go) is how operators change the
// cluster; AAAService (rpc_aaa.go) turns the owner key given at bootstrap
// into an owner certificate, by comparing the key the caller proved in the
// TLS handshake with the stored one. Every management write re-checks its
// preconditions inside the leader-guarded transaction that makes it, so a
// refused request writes nothing.
//
// Roles and etcd membership cannot change in one transaction. Giving
// ConsensusMember adds the node as a learner at the address it reported
// (NodeStatus external_address and consensus_peer_port), named by its node
// ID, and then records the role with the join data; taking it away (also
// by DecommissionNode) removes the member first and updates the record
// after. Sending the same request again after a crash in between completes
// it: an unstarted learner left behind is replaced, an already removed
// member counts as removed. One learner joins at a time (etcd's limit), and
// the curator never removes the last voter nor the member of its own node,
// which would stop it halfway through the call.
//
// This package is being built in steps; see docs/architecture.md for what is
// there today.
package curator
