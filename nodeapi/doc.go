// Package nodeapi is the node API: what an operator asks one node about
// itself (polisctl node logs / services / graph / reboot), served by every
// node on its own port over mTLS with the cluster's certificates.
//
// Why a node API next to the curator: the curator knows the cluster's
// records, not what happens inside a node. A node whose workers crash-loop
// still heartbeats; the answers to "what is it doing, and why" are in the
// node's own memory, and on a VM there is no log file to open. This
// package serves that memory:
//
//   - Logs: the lines of logring, per runnable, as a backlog and a live
//     stream (follow);
//   - GetSupervisorTree: the supervisor's TreeState, the tree of runnables
//     with state, restarts and last error (the supervisor publishes it as
//     an event value; the service reads the newest snapshot);
//   - GetRoleServerGraph: the role server's Graph (who writes and reads
//     each value), each value's version and a one-line summary, and each
//     worker's last reaction: the Why of its last Wait, when, and how many
//     (roleserve.Graph.Workers);
//   - Reboot and PowerOff, through a PowerFunc the caller provides: the
//     process-mode agent restarts itself or exits; a VM's PID 1 reboots or
//     powers off the machine.
//
// Next to NodeService the same server offers the standard
// grpc.health.v1.Health (SERVING while the node API serves) and server
// reflection, so that stock tools work without the .proto files.
//
// Who may call. Every NodeService method declares its caller with the
// node_authz option (nodev1.MethodRequirement), as the curator's do; the
// check runs in the authorization layer the curator shares
// (internal/rpcauth, wired in authz.go) before any handler, a method
// without a declaration is refused, and every call but a quiet method's
// successful one (reading logs and state) leaves an audit line. Users are identified by their certificate from
// the cluster CA; the owner holds every permission, as in the curator, and
// an owner certificate counts only while it is for the current owner key
// (Config.OwnerKey; rotating the key revokes the old key's certificates).
// /metrics off loopback answers the owner alone, by the same rule. A
// node cannot ask the curator whether a caller node is still in good
// standing (it may run no curator), so no method accepts nodes yet.
// Health and reflection answer anyone with a TLS connection: they reveal
// which services exist and whether they serve, nothing else.
//
// The gRPC server and /metrics present the node's API certificate
// (identity.CA.IssueNodeAPI: server authentication, the node ID and the
// node's address as names), which stock TLS clients verify with the
// cluster CA alone (grpcurl -cacert, curl --cacert; polisctl through
// identity.NodeAPIClientConfig). The node agent obtains it from the curator
// and hands it over in Config.APICertificate; each new one is presented
// from the next handshake on, without a restart. Until the node has one
// the servers present its node certificate (roleserve.Credentials), which
// such clients refuse. The servers start only once the node has
// credentials (before enrolment there is no key the cluster vouches for),
// and are restarted when the node certificate is renewed.
package nodeapi
