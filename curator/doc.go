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
// instead of overwriting its successor's state. A leader that stops
// cleanly revokes its lease and hands over at once. One whose process dies
// (SIGKILL, a crash) is deposed by the followers as soon as they see that
// its process is gone (deadleader.go): its curator port and its node's
// etcd peer port both refuse connections, which only a live kernel with
// nothing listening answers, and the follower revokes the dead leader's
// lease. Without that evidence (a timeout, an unreachable network, a
// member not found) it loses the leadership only when its lease expires
// (DefaultLeaseTTL), which after the death of etcd's raft leader is a full
// lease after the new raft leader took over.
//
// Why revoking on evidence is safe. Revocation never lets two leaders
// write: whoever revokes, the revoked leader's guarded transactions fail
// from that moment, exactly as when its lease expires, and its session
// ends, so it stops leading and stands again. So a mistake could only cost
// availability (a live leader deposed for nothing, a new election), never
// correctness. And it takes what a slow or partitioned leader does not
// give: a refused connection is a TCP reset sent by the leader's own
// address because nothing listens there, on two ports of the one process
// (the curator and the etcd member); a slow, paused or overloaded process
// still completes the handshake in its kernel, and a partition or a dead
// machine gives a timeout, so a live leader is never deposed by a mere
// slow follower or a slow network. A curator whose listener closed
// because its run is restarting is ending its term anyway (its election
// runs under that run), and a firewall made to answer both ports with
// resets would cost an election, no more. Reads are protected
// too: before serving a call (heartbeats aside), a leader confirms in one
// etcd round trip that its key still stands (Leadership.Confirm), so a
// leader cut off from etcd never answers from a stale view; a role change
// (UpdateNodeRoles) makes that check, and the owner's standing, conditions
// of the one transaction that plans it from the node cache and writes it
// (confirmedwrite.go). A leader asked
// to take ConsensusMember from its own node hands the leadership over
// (Election.Resign) when another curator stands, and the curator client
// carries the call to the new leader. Any curator says who leads
// (GetLeader, and WatchLeader, rpc_leaderwatch.go, which streams each
// change as the election's observer sees it): that is how the curator
// client finds and follows the leader.
//
// # Where each call is served
//
// Each RPC declares, beside who may call it, which curators serve it
// (the serve field of its authz option; curatorv1.Requirement.Serve), and
// the one interceptor (authz.go, in the authorization layer the node API
// shares: internal/rpcauth) enforces it: SERVE_LEADER calls (every
// mutation, and what only the leader knows) are answered by the leader and
// sent on by the others with UNAVAILABLE naming it; SERVE_ANY calls are
// answered by whichever curator they reach. A test calls every RPC at a
// follower and checks both halves (TestServedWhereDeclared).
//
// The SERVE_ANY calls that read node records (Watch, GetClusterInfo,
// ListNodes) are linearizable wherever they land: the interceptor first
// reads etcd's revision, with one quorum read of a single key, and waits
// until the curator's node cache holds every change up to it, asking the
// cache's watch for etcd's progress when the cache's own revision is
// behind (nodeCache.fenced). So a
// follower never answers with data older than a write acknowledged before
// the call; a Watch stream then trails etcd by one watch event. The calls
// waiting for a fence share the next quorum read (fencebatch.go), so a
// thousand streams opening at once cost a few reads, not a thousand. The health
// ListNodes adds is every curator's judgement alike (below, "Health").
// Heartbeat is SERVE_ANY too, and the one call served without that fence
// (declared unfenced in its option): a quorum read per heartbeat would
// cost more than the heartbeat.
//
// # The calls nodes make
//
// CuratorService (rpc_curator.go) acts only on the caller: the node whose
// ID derives from the key proved in the TLS handshake (Register,
// CommitRegistration, Join) or the node named by the caller's certificate
// (UpdateNodeStatus, Heartbeat, RenewCertificate). Requests carry no node
// ID to get wrong. Lifecycle steps are checked and written in one
// compare-and-swap under the leadership guard (updateNode), so a refused
// request, or one racing an operator, writes nothing it should not.
// Register and CommitRegistration succeed again on retry, because a node
// that lost a response must be able to finish.
//
// Watch streams are served from the node cache, the curator's one etcd
// watch over all node records. A stream is a cursor on an in-memory value
// of immutable snapshots; each snapshot lists the records it changed and
// points to the next, so a stream learns what changed by following that
// chain and comparing only the records named (work in proportion to the
// change, not to the cluster). A thousand watching nodes cost one etcd
// watch, and a slow watcher skips to the newest state instead of
// queueing. WatchClusterDirectory streams follow the same snapshots but
// send only when the curator set changes (each snapshot carries it, shared
// with the previous one until a curator or its endpoint changes): what a
// node needs to reach the cluster, without every other node's changes. A
// stream ends with UNAVAILABLE when its curator stops following etcd, and
// with PERMISSION_DENIED when its caller stops being an UP node. An etcd
// election is not the end of following: the cache's watch resumes from
// its revision once the member has a leader again (event/etcd's
// LeaderlessGrace), so streams outlive raft leader changes and their
// nodes need not read everything again.
//
// # Health
//
// A node's health is judged from its heartbeats (health.go), by whichever
// curator is asked, and a leader change changes nobody's health: every
// curator takes heartbeats, and every curator knows every heartbeat, its
// own exactly and the others' at most one heartbeat interval late
// (heartbeats.go). Each curator keeps the time of each node's last
// heartbeat in memory and, once per interval in which it received any,
// writes one record to etcd (heartbeats/<its node ID>): every node it
// heard within the last two timeouts, with how long ago. Every curator
// follows those records with one etcd watch and keeps the newest time per
// node. A new leader has been reading them all along; a curator that just
// started reads them before it judges anyone (ListNodes waits for that),
// and counts the silence of a node no record lists from its own start.
//
// Why this and not a write per heartbeat. At 1,000 nodes and the default
// interval of 5 s, writing each heartbeat to etcd would be 200 writes a
// second: 200 raft proposals replicated to every member, 200 revisions a
// second (720,000 in the hour of history consensus keeps before it
// compacts), and 200 watch events a second to every curator, all for a
// fact that the next heartbeat replaces. The records cost at most one
// write per curator per interval, whatever the number of nodes: 0.6
// writes a second with three curators, none from a curator no node
// heartbeats to. Their size grows with the nodes: an entry is a 29-byte
// node ID and an age, about 36 bytes, and each node sits in the record of
// the curator it heartbeats to (in two for two timeouts after it moves),
// so 1,000 nodes put about 36 KB into etcd per interval in all, about
// 7 KB/s, or some 26 MB of the hour's history, against etcd's default
// 2 GiB quota; a record is capped at 20,000 nodes (about 720 KB, under
// etcd's 1.5 MiB request limit). A heartbeat received by one curator
// reaches the others' judgement at most one interval later; the timeout
// is three intervals, so a node that heartbeats on schedule is never
// judged dead anywhere, and one that stops is judged HEARTBEAT_TIMEOUT by
// every curator within an interval of the one it heartbeated to. Times
// are each writer's clock: curators' clocks must agree to well within an
// interval (NTP does). Records of curators that stopped writing are
// deleted by any curator after ten timeouts.
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
// member counts as removed. Up to consensus.MaxLearners learners join at
// once (two: the second and third members of a new cluster together), and
// the curator never removes the last voter nor the member of its own node,
// which would stop it halfway through the call. A decommissioned node is
// refused every call with an ErrorInfo detail (IsNodeDecommissioned): that
// refusal is how it learns that its roles are gone, since the write that
// clears them also cuts it off.
//
// # Backups and recovery
//
// BackupCluster (rpc_backup.go), the owner's alone, streams a snapshot of
// the whole etcd key space from the curator's own consensus member, after
// the call was fenced like every SERVE_ANY call, so it holds every write
// acknowledged before it; polisctl encrypts it to the owner key
// (curator/backup). After a cluster lost its quorum and was recovered on a
// survivor (consensus.PrepareRecovery), etcd holds the survivor alone but
// the records still give the lost members ConsensusMember; each new leader
// drops them (recovery.go: member certificate revoked, roles taken, as
// UpdateNodeRoles would), then records the recovery at recoveryKey, which
// GetClusterInfo returns, and leaves a warning in its log. A cluster
// restored from a backup onto a new machine (consensus.PrepareRestore) is
// followed up the same way, its old members all lost; before that, the
// new machine's curator adds its node to the restored records, UP and a
// consensus member (Bootstrap with BootstrapParams.Restored, restore.go).
//
// # What the curator stores, and who it serves as
//
// Every stored byte is checked on its way in and out (validate.go): no
// unknown protobuf fields, size caps, every field of its documented form;
// requests over MaxRequestSize are refused undecoded. Registration, the
// one way a caller without approval makes the curator store something, is
// bounded per key and in all (registration.go: Config.MaxNewNodes); the
// register ticket can be rotated, and the key of a node decommissioned and
// then deleted is retired for good. A curator serves with a short-lived
// curator certificate that it issues to itself only while its node holds
// ConsensusMember, and renews while it runs (certificate.go): clients
// accept no other server certificate, and the cluster directory lists only
// consensus members. docs/threat-model.md has the whole picture.
//
// # The pod network
//
// Each node that holds KubernetesWorker or KubernetesController has its
// own pod range out of the cluster's (PodNetwork, chosen at bootstrap,
// DefaultPodRange unless said otherwise), given by UpdateNodeRoles in the
// write that gives the role and kept until the node's record is deleted
// (podnetwork.go: one key per range, created in that write, so no two
// curators ever give a range twice); each new leader gives one to any
// such node recorded without (a cluster from before pod ranges, or
// before controllers got them). A worker's Pods take their addresses
// from it; a controller-only node uses its first address alone, as its
// tunnel's, so that its apiserver reaches Pods and their replies route
// back. A node publishes the public half of its WireGuard key
// (SetWireGuardKey) and follows its peers (WatchNetworkPeers,
// rpc_network.go, served from the node cache like Watch): every other UP
// worker or controller with its address, range and key, the whole list
// again whenever a record changes it.
//
// # The cluster's Kubernetes PKI
//
// The curator keeps the Kubernetes PKI (kube/pki: the Kubernetes CA and
// the service-account key) in its own etcd namespace, at pki.StoreKey
// ("kubernetes/pki" under the curator's prefix), where the apiserver's
// confined etcd endpoint cannot reach it. A leader makes sure it exists
// each time it starts leading (pki.Ensure: created once per cluster, in
// one transaction), and logs whether it created or loaded it; the
// kubernetes worker of every controller node reads it with pki.Load from
// the curator's namespace, so every apiserver serves with the same CA and
// accepts the same service-account tokens. ManagementService's
// IssueKubernetesCredentials (rpc_kubernetes.go) signs the owner's
// Kubernetes client certificates with it: for a public key the owner
// sends, as KubernetesAdminUser in system:masters, for
// KubernetesAdminLifetime (a day, since Kubernetes cannot revoke them).
//
// The path of an operator's call through the client, the authorization
// layer, the leader and an etcd transaction is drawn in
// docs/architecture.md ("Three paths to follow").
package curator
