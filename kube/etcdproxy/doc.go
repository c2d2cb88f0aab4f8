// Package etcdproxy confines a client of etcd to one prefix of the key
// space: it serves etcd's gRPC API on a unix socket of its own and forwards
// every call to the cluster's etcd with each key moved under the prefix.
//
// # Why
//
// kube-apiserver keeps its state in etcd and takes an --etcd-prefix, but
// that prefix is a convention the apiserver keeps, not a limit etcd
// enforces: a client with access to the cluster's etcd could read or
// overwrite the curator's keys, the consensus CA or the node certificates.
// Polis gives the apiserver no such client. It reaches etcd only through
// this proxy, whose key space is the prefix and nothing else: the key "x"
// is stored as prefix+"x", a range ending in "\x00" ("to the end of the key
// space") ends at the end of the prefix, and no key, range, watch, lease or
// transaction sent through it can name a key outside. A path such as "../x"
// is not special in etcd's flat key space, so it too stays under the prefix.
//
// # What is served
//
// Exactly what kube-apiserver uses, each confined:
//
//   - KV: Range, Put, DeleteRange and Txn (nested transactions included),
//     through etcd's own client/v3/namespace, which rewrites requests and
//     strips the prefix from every key in the responses. Compact is refused:
//     compaction is global to etcd (it would drop the history of keys
//     outside the prefix), and the cluster's etcd compacts itself; run the
//     apiserver with --etcd-compaction-interval=0.
//   - Watch: each watch stream is forwarded as one stream to etcd, so watch
//     ids, progress requests (which the apiserver's watch cache relies on)
//     and cancellations keep etcd's exact semantics; keys are moved under the
//     prefix in create requests and out of it in events.
//   - Lease: leases are global to etcd, so the proxy remembers the leases
//     granted through it and refuses to revoke, keep alive, inspect or
//     attach keys to any other (a client could otherwise revoke the
//     curator's election lease and delete its keys). The record is in
//     memory: after the proxy restarts, older leases can no longer be used
//     through it and simply expire, which the apiserver tolerates (it grants
//     new ones).
//   - Maintenance: Status only (version and database size, which the
//     apiserver reads to know which etcd features it may use). Snapshot,
//     Hash, Defragment, alarms and member moves are refused: they act on, or
//     reveal, the whole database.
//
// Cluster, Auth, election and lock services are not served (gRPC answers
// Unimplemented).
//
// # Access
//
// The socket is created 0600 (owner only); the proxy does no authentication
// of its own, so the directory it lives in must be private to the node
// agent, like every socket under the node's ephemeral storage. The proxy's
// own client must reach etcd unconfined (it does the confining) and must
// have a live gRPC connection (clientv3.New, not a namespaced wrapper).
package etcdproxy
