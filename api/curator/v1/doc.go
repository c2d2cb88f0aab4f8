// Package curatorv1 is the curator's gRPC API, version 1: the Go code
// generated from api/proto/polis/curator/v1/*.proto (proto package
// polis.curator.v1), and MethodRequirement, which says who may call each
// method. The .proto files are the reference; this page is the overview.
//
// # Three services, three audiences
//
// Nodes and operators only ever talk to a curator, and each talks to the
// service made for it:
//
//   - CuratorService is for nodes. A new node registers with the cluster's
//     register ticket and, once an operator has approved it, collects its
//     node certificate (Register, CommitRegistration); after a reboot it
//     rejoins with its key (Join). An UP node watches its own record to
//     learn its roles and the other nodes' records to learn where the
//     curators are (Watch), reports its status (UpdateNodeStatus) and
//     liveness (Heartbeat), and renews its certificate (RenewCertificate).
//     Anyone may ask where the leader is and which CA the cluster uses
//     (GetLeader, GetCACertificate), so that a client can find and check
//     the cluster before it has credentials.
//   - ManagementService is for operators (polisctl): read the cluster
//     (GetClusterInfo, ListNodes), admit nodes (GetRegisterTicket,
//     RotateRegisterTicket, ApproveNode), assign roles (UpdateNodeRoles),
//     label nodes (UpdateNodeLabels), and take nodes out
//     (DecommissionNode, DeleteNode).
//   - AAAService turns keys into user credentials: TakeOwnership gives the
//     holder of the owner key an owner certificate, and RotateOwnerKey
//     replaces the owner key, which revokes every certificate of the old
//     one.
//
// A node's life in these calls: Register (NEW), ApproveNode (STANDBY),
// CommitRegistration (UP, certificate issued), then Heartbeat,
// UpdateNodeStatus, Watch and RenewCertificate while it runs, Join after
// each reboot, until DecommissionNode (DECOMMISSIONED) and DeleteNode.
//
// # Who may call what
//
// Every RPC declares, in its .proto definition, the caller it accepts,
// with the option polis.curator.v1.authz (an AuthzRequirement):
//
//	rpc ApproveNode(ApproveNodeRequest) returns (ApproveNodeResponse) {
//	  option (polis.curator.v1.authz) = {
//	    caller: CALLER_USER
//	    permission: PERMISSION_APPROVE_NODE
//	  };
//	}
//
// Callers are told apart by their TLS client certificate, and the kinds
// of caller (Caller) are separate rules, not levels:
//
//	caller                  who                                       methods
//	CALLER_UNAUTHENTICATED  anyone; the call ignores who is calling   GetLeader, GetCACertificate
//	CALLER_KEY_HOLDER       anyone, known by the key of its TLS       Register, CommitRegistration,
//	                        certificate (usually self-signed)         Join, TakeOwnership
//	CALLER_NODE             a node with a node certificate            Watch
//	CALLER_NODE_SELF        the same, acting on its own record        UpdateNodeStatus, Heartbeat,
//	                                                                  RenewCertificate
//	CALLER_USER             a user with a user certificate who        every ManagementService call,
//	                        holds the declared permission             one permission each;
//	                                                                  RotateOwnerKey
//
// The declaration is checked in one place: the curator's gRPC interceptors
// (part of the curator service, not of this package) look each call's
// method up with MethodRequirement before any handler runs, and compare
// the result with the caller's identity (identity.PeerIdentity). A method
// that declares nothing, or something invalid, gets an error from
// MethodRequirement and must be refused to everyone; the tests of this
// package fail for every such method, so a new RPC cannot ship without a
// declaration.
//
// "A node may only update itself" is enforced by construction, not by a
// comparison each handler must remember: the requests of CALLER_NODE_SELF
// methods carry no node ID at all (a test checks this), so the node acted
// on is always the one named by the caller's certificate. KEY_HOLDER
// handlers likewise act only on the caller's key: the node with that key,
// or the owner if it is the owner key.
//
// Users hold permissions (Permission), one per kind of Management call;
// reading the cluster is one permission for GetClusterInfo and ListNodes.
// The owner holds every permission. Other users get permissions granted
// explicitly, so that one job (say, approving nodes) can be delegated
// without the others; this API does not yet have the calls that create
// users and grant permissions.
//
// A valid certificate is necessary, never sufficient: the curator also
// checks the caller against its state on every call, so a decommissioned
// node is refused whatever certificate it still holds.
//
// # Generated code
//
// The *.pb.go files are generated and committed. After changing a .proto
// file, run scripts/gen-proto (buf with local, version-pinned plugins; no
// protoc), and commit the result; scripts/check-proto lints the .proto
// files and fails when the committed code is out of date.
package curatorv1
