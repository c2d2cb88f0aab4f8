// Package nodev1 is the node's own protobuf messages and API, version 1:
// the Go code generated from api/proto/polis/node/v1/*.proto (proto package
// polis.node.v1). node.proto holds what a node keeps and is given (its
// parameters, its sealed configuration); nodeapi.proto the NodeService
// every node serves on its own port (package nodeapi). Each NodeService
// method declares who may call it, and whether its successful calls are
// quiet, with the node_authz option, read by MethodRequirement; the curator's
// caller kinds (curatorv1.Caller) are reused, with the node API's own
// permissions.
package nodev1
