// Package consensus runs the member of Polis' replicated key-value store on
// a control-plane node: an etcd server embedded in the node agent, with its
// own peer certificate authority, local-only clients confined to
// namespaces, and its state published as an event value.
//
// # Why a package around etcd
//
// Embedding etcd is a dozen lines; running it as part of a cluster is not.
// Somebody has to mint the certificates members use to talk to each other,
// hand a new member everything it needs to join, promote it once it has
// caught up, make sure a removed member can never come back with its old
// credentials, decide after a reboot whether a data directory may be
// started, and keep the services that share the store from stepping on each
// other's keys. If every caller did a part of that, the parts would
// disagree. This package owns all of it and offers the curator (which
// decides who is a member) a handful of operations that keep etcd's
// membership, the certificates and the revocation list in step.
//
// # The model
//
// A [Service] is made from a validated [Config] by [New], runs as one
// supervised runnable ([Service.Run]) and publishes its [Status] through
// [Service.Status]: starting, running (member and cluster IDs, learner or
// voter, leader or not), stopped (with the error). There is nothing global;
// a process may run several services, which the tests do.
//
// Peers talk mutual TLS with certificates from the cluster's peer CA, an
// ed25519 CA created at bootstrap. The CA certificate is on every member's
// disk; the CA key lives only in etcd, under the internal prefix
// /consensus/, so that any voter can issue and revoke peer certificates and
// no single disk holds the key outside etcd's own data. Peer certificates
// carry the member's name and peer IP and do not expire: a member's right to
// be a peer ends with its removal, which revokes its certificate.
//
// Clients reach etcd only over a unix socket (mode 0600, in the data
// directory unless configured elsewhere): nothing serves clients on the
// network. [Status.ClientFor] gives a
// client confined to /namespace/<user>/, with user names checked by an
// anchored expression that excludes "/", so namespaces can neither collide
// nor reach the internal prefix. [Status.ConnectionFor] gives a namespace's
// prefix with an unconfined client of its own connection, for a proxy that
// confines another process to the namespace (kube/etcdproxy serves
// /namespace/kubernetes/ to kube-apiserver): the one way past the
// namespaced clients, and only for code that confines.
//
// # Bootstrap, join, restart
//
// What Run does depends on the data directory, not only on the
// configuration, so the node agent can pass the same configuration on every
// boot:
//
//   - Empty directory and [Config.Bootstrap]: create the CA, this member's
//     key and certificate and an empty CRL, start a one-member cluster, then
//     move the CA key from disk into etcd.
//   - Empty directory and [Config.Join]: check the [JoinData] (from
//     [Status.AddLearner] on an existing member) against this member's name,
//     address and key, start as a learner, and promote itself once etcd
//     agrees it has caught up (retrying with backoff).
//   - A directory made before: restart from it. identity.json records which
//     member of which cluster (CA fingerprint, etcd IDs) the directory holds;
//     a configuration that disagrees is refused with [ErrDataMismatch], and a
//     member that learnt it was removed refuses with [ErrRemoved]. Such a
//     directory is never wiped or reused: that is an operator's decision.
//
// identity.json is written after the credentials and before etcd first
// starts, and every step after it is repeated on each start until done, so
// a crash at any point leaves a directory that either restarts or starts
// from scratch.
//
// A restart compares this member's data with every peer's before it
// serves (etcd's initial corruption check) when every peer answers on its
// peer port; a cluster starting whole, whose peers cannot answer until
// their own starts are over, skips it and says so (initialcheck.go), and
// etcd's leader compares the members after each compaction either way.
//
// # Membership
//
// [Status.AddLearner] issues the newcomer's certificate for the public key
// it sent (its private key never leaves it), adds it as a learner and
// returns its [JoinData]. [Status.Remove] removes a member from etcd and
// revokes its certificate: the CRL is kept in etcd, and every member mirrors
// it into the file etcd's peer listener checks on each new connection, so a
// removed member's certificate is refused by every member within moments.
// [Status.Promote] promotes a learner by hand; joiners do not need it. These
// operations wait while etcd's strict reconfiguration check says the cluster
// is not yet healthy enough for a change (with two voters or more, until
// this member has been connected to enough of them for five seconds: just
// after a new voter started, say), within the caller's context. Up to
// [MaxLearners] learners may join at once; while the cluster has a single
// voter, the check lets them all in without waiting.
//
// # Snapshots
//
// [Status.Snapshot] streams a consistent copy of the member's whole key
// space in etcd's snapshot format (the bbolt database followed by its
// SHA-256), for the curator's backups. Like the membership methods it is
// a method of the Status, not of the namespaced clients, which cannot see
// past their namespace.
//
// A [Snapshotter], a runnable beside the Service, keeps periodic snapshots
// on the member's own disk, as a [SnapshotPolicy] says (every hour, the
// last six, by default): each written to a temporary file, checked against
// etcd's hash, synced and only then renamed, 0600 since the database holds
// the CA keys, the oldest pruned. [ListSnapshots] lists them. They are what
// is left to recover from when the other members and every backup are
// gone.
//
// # Recovery after quorum loss
//
// [PrepareRecovery], run against a stopped survivor's data directory,
// refuses while any other member answers ([ErrQuorumAlive]) and otherwise
// marks the directory so that the next Run starts etcd with
// force-new-cluster: the same cluster and member IDs, all the data, and
// this member as the only one. Run then records the recovery in etcd
// ([Status.Recovery]) and clears the mark. recovery.go explains why that
// is safe. The first start after a recovery revokes every lease in the
// data: they were all granted to processes of the lost cluster, and the
// curator would otherwise wait out the election lease of a leader that is
// gone.
//
// [PrepareRestore] makes a new member's data directory on fresh storage
// from a snapshot's database (a backup's, or an automatic snapshot):
// etcd's own restore lays out a WAL and a membership of this member alone,
// the peer CA in the snapshot issues its certificate, and its first Run
// records the restore as a recovery from a backup, the old members lost
// (restore.go).
//
// # What this package does not do
//
// It decides nothing about membership: which nodes are members is the
// curator's business (after a recovery, the curator drops the lost members
// from its records and revokes their certificates). It does not rotate
// certificates or encrypt backups. It does not expose etcd to
// the network for clients, nor the unconfined client to anyone. A Status's
// clients work only as long as the Run that published it; consumers follow
// the status value and make new clients after a restart.
package consensus
