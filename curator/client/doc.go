// Package client connects to a cluster's curators and sends each call to
// one that serves it: the leader, whichever curator that is at the moment,
// for what only the leader serves, and any healthy curator for the rest.
// Callers never deal with leadership themselves, and the followers share
// the load of reads and watches.
//
// # Why on the client side
//
// Only the leading curator serves mutations and what only it knows; the
// others answer those calls UNAVAILABLE naming the leader (each RPC
// declares where it is served: curatorv1.Requirement.Serve). Someone has to
// turn "not the leader" into "ask the leader", and there are two places to
// do it. A follower could forward every call to the leader: then each call
// crosses two connections, followers need credentials to act on behalf of
// any caller (and the leader must trust them to say who the caller is),
// and Watch streams are relayed through a process that may itself go away.
// The client can instead find the leader and talk to it directly: one
// connection, the caller's own certificate checked by the curator that
// serves it, and nothing in the curators but the election they run anyway.
// This package does that, inside a *grpc.ClientConn, so that generated
// stubs work unchanged and callers cannot forget to handle a leader change.
//
// # How calls are routed
//
// New returns one *grpc.ClientConn with its own gRPC resolver (passed with
// grpc.WithResolvers, never registered globally), its own load-balancing
// policy (balancer.go) and two interceptors. The resolver hands the
// connection every known curator (Config.Endpoints and the live
// Config.Directory), each dialled by IP and checked against its own name
// (its node ID, or its IP when only that is known: every curator
// certificate carries both), and marks the leader it found. The balancer
// keeps a connection to each curator and routes every call by the
// declaration of its method (curatorv1.Requirement.Serve): SERVE_ANY calls
// (Watch, ListNodes, Heartbeat, GetClusterInfo, GetOwnerKey, GetLeader,
// ...) go round robin to
// the curators that are connected and report SERVING on grpc.health.v1;
// SERVE_LEADER calls, and anything undeclared, to the marked leader. A
// node's two Watch streams thus land on two different curators, and many
// nodes' streams spread over all of them. Followers answer SERVE_ANY calls
// linearizably (see package curator), so spreading changes no answer.
// Only a curator certificate (identity's client configurations insist on
// one) passes: a node that is not a curator, or no longer one, cannot pose
// as one, whatever GetLeader answers name.
//
// Discovery's probes dial a curator by IP and check its certificate
// against that IP, whatever node ID the endpoint gives; the leader found
// is then followed under the node ID its own answer gives. So a curator
// known under a node ID that no longer serves at that address is still
// found, if another curator of the cluster serves there now: after a
// restore from a backup onto new nodes at the old members' addresses,
// the old nodes' saved directories name the old IDs. That is sound
// because a node ID adds no authority among curators, which all hold the
// cluster's CA key; docs/threat-model.md ("What each certificate
// proves") says what it costs.
//
// # How leader changes are followed
//
// The resolver discovers the leader by calling CuratorService.GetLeader,
// which every curator answers, on the known curators one after another.
// The leader the connection follows is asked first: while it says it
// leads, it is believed over any follower, whose view may lag, so a stale
// follower never moves a connection off a healthy leader (a leader that
// hangs costs one probe timeout, probeTimeout, before the others are
// asked). The others are asked starting with a different one each round.
// A curator whose probe failed is asked last in later rounds, and a follower naming it as the leader is not believed until it
// answers again: a dead leader stays named by every curator until its
// lease runs out, and must cost no round a failed probe first. When the
// leader followed stops answering and nobody names another, leader calls
// fail over to the interceptors' retry at once instead of going to it.
//
// A round runs when gRPC asks (the connection to the leader broke), when
// an interceptor asks (a call failed with UNAVAILABLE), when the directory
// changes while no leader is known, and when the leader watch names a new
// leader. A curator that hangs without closing the connection is noticed
// by keepalive pings (KeepaliveTime, KeepaliveTimeout): its connection
// breaks, which starts a round. Rounds that follow each other quickly
// without finding a new leader are spaced out with an exponential backoff
// (25ms growing to one second), so that calls during an election do not
// hammer the curators; the leader watch's news is acted on at once.
//
// The leader watch (leaderwatch.go) is what makes a failover quick: each
// connection holds one CuratorService.WatchLeader stream, on a follower
// when there is one, and every curator pushes its view of the election as
// soon as it changes. Polling would learn of the successor of a dead
// leader at its first round after the election; the watch learns of it
// when the successor is elected. The curator it names is asked first and
// followed if it says it leads, so a stale view moves nothing.
//
// The interceptors retry every call that fails with UNAVAILABLE: a leader
// call once a new discovery round has ended, a SERVE_ANY call after a
// short backoff (10ms growing to one second) on the next curator in turn,
// without waiting for any leader. They do so until the call succeeds,
// fails otherwise, or its context ends. A call whose context ends while it
// waits fails with the context's code (DEADLINE_EXCEEDED or CANCELED), and
// its message says what the last attempt ran into. With Config.FailFast
// (polisctl's commands), a call instead ends as soon as a discovery round
// newer than its failed attempt reached no curator at all (every
// connection refused, or its handshake failed), with an error
// IsUnreachable recognises: a stopped cluster is reported at once.
//
// # Guarantees
//
//   - Callers never see "not the leader": a unary call, or a server stream
//     that has not yet delivered a message, is retried on the new leader
//     (a SERVE_ANY one on another curator) within the call's deadline. How soon there is a new leader is the
//     election's business: at once when a leader stops cleanly, after its
//     lease (curator.DefaultLeaseTTL) when it dies or is cut off from etcd.
//   - Retried unary calls may reach a curator twice (the first leader may
//     have acted before it failed). The curator's mutating RPCs are
//     idempotent by design (see their proto documentation), so this is
//     harmless; do not use this package for a service where it is not.
//   - A stream that has delivered messages is never replayed: its caller
//     gets the UNAVAILABLE and decides how to resume (for Watch: watch
//     again). The next call goes to whoever leads, or serves, by then.
//   - Calls any curator serves keep working while any one curator is
//     down, leader or not, and never wait for an election.
//
// # What it does not do
//
// It does not weigh curators by their load: round robin from a random
// start per connection spreads many clients' calls evenly enough, though
// the first calls of a new connection go to whichever curators it reached
// first. A curator that is unreachable while its TCP connection
// stays up (a silent partition) is only noticed by the keepalive pings,
// some seconds later; calls meanwhile wait, so give every call a deadline.
// It does not keep Watch streams through an etcd raft leader change:
// every curator's streams end then (package curator), and each caller
// watches again, on whichever curator is next in turn. It keeps no list
// of curators of its own:
// Config.Directory is how the node agent keeps it current. Calls without a
// deadline wait for a leader as long as their context lives.
package client
