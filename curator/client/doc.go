// Package client connects to the curator leader, whichever curator that is
// at the moment, so that callers never deal with leadership themselves.
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
// # How leader changes are followed
//
// New returns a connection with its own gRPC resolver (passed with
// grpc.WithResolvers, never registered globally) and two interceptors.
//
// The resolver discovers the leader by calling CuratorService.GetLeader,
// which every curator answers, on the known curators one after another
// (Config.Endpoints and the live Config.Directory), and points the
// connection at the leader it is told of. The leader the connection
// follows is asked first: while it says it leads, it is believed over any
// follower, whose view may lag, so a stale follower never moves a
// connection off a healthy leader (a leader that hangs costs one probe
// timeout, probeTimeout, before the others are asked). The others are
// asked starting with a different one each round. The connection dials
// the leader by IP and checks its certificate against the leader's node ID,
// which every curator certificate carries, so TLS verification holds
// whichever curator leads. Only a curator certificate (identity's client
// configurations insist on one) passes: a node that is not a curator, or no
// longer one, cannot pose as the leader, whatever GetLeader answers name. A round runs when gRPC asks (the connection to the leader
// broke), when an interceptor asks (a call failed with UNAVAILABLE), or when
// the directory changes while no leader is known. A curator that hangs
// without closing the connection is noticed by keepalive pings
// (KeepaliveTime, KeepaliveTimeout): its connection breaks, which starts a
// round. Rounds that follow each
// other quickly without finding a new leader are spaced out with an
// exponential backoff (25ms growing to one second), so that calls during an
// election do not hammer the curators.
//
// The interceptors retry every call that fails with UNAVAILABLE once a new
// discovery round has ended, until the call succeeds, fails otherwise, or
// its context ends. A call whose context ends while it waits fails with the
// context's code (DEADLINE_EXCEEDED or CANCELED), and its message says
// what the last attempt ran into.
//
// # Guarantees
//
//   - Callers never see "not the leader": a unary call, or a server stream
//     that has not yet delivered a message, is retried on the new leader
//     within the call's deadline. How soon there is a new leader is the
//     election's business: at once when a leader stops cleanly, after its
//     lease (curator.DefaultLeaseTTL) when it dies or is cut off from etcd.
//   - Retried unary calls may reach a curator twice (the first leader may
//     have acted before it failed). The curator's mutating RPCs are
//     idempotent by design (see their proto documentation), so this is
//     harmless; do not use this package for a service where it is not.
//   - A stream that has delivered messages is never replayed: its caller
//     gets the UNAVAILABLE and decides how to resume (for Watch: watch
//     again). The next call goes to whoever leads by then.
//
// # What it does not do
//
// It does not spread load yet: every call goes to the leader, although
// followers serve the SERVE_ANY calls (Watch, GetClusterInfo) too; a
// connection that balances those over every curator is still to come. A leader that is unreachable while its TCP connection
// stays up (a silent partition) is only noticed by the keepalive pings,
// some seconds later; calls meanwhile wait, so give every call a deadline.
// It keeps no list of curators of its own:
// Config.Directory is how the node agent keeps it current. Calls without a
// deadline wait for a leader as long as their context lives.
package client
