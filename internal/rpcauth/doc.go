// Package rpcauth is the one authorization layer of Polis' gRPC servers:
// the curator's (curator/authz.go) and every node's own API
// (nodeapi/authz.go) run their calls through it.
//
// Every method of a Polis API declares who may call it as an option in its
// .proto file (api/): the caller kind (CALLER_USER, CALLER_NODE, …), the
// permission a user must hold, and per-method policies such as quiet (no
// audit line for a successful call). A call passes these steps before its
// handler runs, in this order:
//
//  1. open services (grpc.health.v1 and server reflection) pass unchecked:
//     they tell which services exist and whether they serve, nothing more;
//  2. the method's requirement is looked up (Server.Lookup, which reads the
//     option from the compiled descriptors); a method without a valid
//     declaration is refused (PERMISSION_DENIED), never allowed;
//  3. the caller's identity is read from its TLS certificate
//     (identity.PeerIdentity); no certificate the cluster accepts is
//     UNAUTHENTICATED;
//  4. the server's own steps (Server.Authorize): they call CheckCaller for
//     the caller kind and permission, and OwnerStands for the owner's
//     standing (a certificate for a rotated owner key is revoked), in the
//     order the server needs (the curator sends a call on to the leader
//     before it judges the caller, for one);
//  5. an audit line when the call ends ("call": method, caller, code,
//     error), except for the successful calls of quiet methods.
//
// RegisterStandard adds the open services to a server. What is particular
// to one server stays with it: where the curator serves a method (leader or
// any curator, fencing its node view) and a node's standing in the
// cluster are the curator's; how a node learns the owner key is the node
// API's.
package rpcauth
