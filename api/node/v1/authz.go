package nodev1

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	cpb "github.com/polis-os/polis/api/curator/v1"
)

// Requirement is what a caller must present to call one NodeService
// method, as the method declares it with the node_authz option.
type Requirement struct {
	// Caller is CALLER_USER or CALLER_NODE.
	Caller cpb.Caller
	// Permission is set exactly when Caller is CALLER_USER.
	Permission NodePermission
	// Quiet says that the method's successful calls leave no audit log
	// line (refused and failed ones do).
	Quiet bool
}

// String describes r for logs and errors.
func (r Requirement) String() string {
	if r.Caller == cpb.Caller_CALLER_USER {
		return "user with " + r.Permission.String()
	}
	return strings.ToLower(strings.TrimPrefix(r.Caller.String(), "CALLER_"))
}

// validate accepts the two kinds of caller a node API has: a user holding
// a known permission, or a node without one.
func (r Requirement) validate() error {
	switch r.Caller {
	case cpb.Caller_CALLER_USER:
		if _, known := NodePermission_name[int32(r.Permission)]; !known || r.Permission == NodePermission_NODE_PERMISSION_UNSPECIFIED {
			return fmt.Errorf("caller %s needs a valid permission, not %s", r.Caller, r.Permission)
		}
	case cpb.Caller_CALLER_NODE:
		if r.Permission != NodePermission_NODE_PERMISSION_UNSPECIFIED {
			return fmt.Errorf("caller %s takes no permission, but %s is declared", r.Caller, r.Permission)
		}
	default:
		return fmt.Errorf("caller %s is not a valid caller of a node API (CALLER_USER or CALLER_NODE)", r.Caller)
	}
	return nil
}

// MethodRequirement returns the requirement that the gRPC method fullMethod
// ("/polis.node.v1.NodeService/Logs") declares with the node_authz option.
// It fails for an unknown method, or one without a valid declaration: the
// node must refuse such a call.
func MethodRequirement(fullMethod string) (Requirement, error) {
	md, err := cpb.FindMethod(protoregistry.GlobalFiles, fullMethod)
	if err != nil {
		return Requirement{}, err
	}
	opts, _ := md.Options().(*descriptorpb.MethodOptions)
	if opts == nil || !proto.HasExtension(opts, E_NodeAuthz) {
		return Requirement{}, fmt.Errorf("method %s declares no requirement: add option (%s) to its rpc definition", md.FullName(), E_NodeAuthz.TypeDescriptor().FullName())
	}
	a, _ := proto.GetExtension(opts, E_NodeAuthz).(*NodeAuthzRequirement)
	r := Requirement{Caller: a.GetCaller(), Permission: a.GetPermission(), Quiet: a.GetQuiet()}
	if err := r.validate(); err != nil {
		return Requirement{}, fmt.Errorf("method %s declares an invalid requirement: %w", md.FullName(), err)
	}
	return r, nil
}
