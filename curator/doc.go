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
// This package is being built in steps; see docs/architecture.md for what is
// there today.
package curator
