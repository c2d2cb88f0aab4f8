package curatorv1

import (
	"fmt"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// Requirement is what a caller must present to call one method, as the
// method declares it with the authz option in its .proto file. It is a
// plain value: compare it, switch on it, log it.
type Requirement struct {
	// Caller is the kind of caller the method accepts; never
	// CALLER_UNSPECIFIED in a Requirement that MethodRequirement returns.
	Caller Caller
	// Permission is the permission the calling user must hold. It is set
	// exactly when Caller is CALLER_USER.
	Permission Permission
	// Serve is which curators serve the method; never SERVE_UNSPECIFIED
	// in a Requirement that MethodRequirement returns.
	Serve Serve
	// Quiet says that the method's successful calls leave no audit log
	// line (refused and failed ones do).
	Quiet bool
	// Unfenced says that a SERVE_ANY method is served from the curator's
	// node view as it is, without fencing it on a quorum read first.
	Unfenced bool
}

// ServedByAny says whether every curator, not only the leader, serves
// the method.
func (r Requirement) ServedByAny() bool { return r.Serve == Serve_SERVE_ANY }

// String describes r for logs and errors: "unauthenticated", "key holder",
// "node", "node self" or "user with PERMISSION_APPROVE_NODE", then where
// it is served: "node at any curator", "user with
// PERMISSION_APPROVE_NODE at the leader".
func (r Requirement) String() string {
	switch r.Serve {
	case Serve_SERVE_LEADER:
		return r.caller() + " at the leader"
	case Serve_SERVE_ANY:
		return r.caller() + " at any curator"
	}
	return r.caller() + " served nowhere (" + r.Serve.String() + ")"
}

// caller describes r's caller rule.
func (r Requirement) caller() string {
	switch r.Caller {
	case Caller_CALLER_UNAUTHENTICATED:
		return "unauthenticated"
	case Caller_CALLER_KEY_HOLDER:
		return "key holder"
	case Caller_CALLER_NODE:
		return "node"
	case Caller_CALLER_NODE_SELF:
		return "node self"
	case Caller_CALLER_USER:
		return "user with " + r.Permission.String()
	}
	return fmt.Sprintf("invalid requirement (caller %s, permission %s)", r.Caller, r.Permission)
}

// validate checks that r is a requirement a caller can meet and that
// means one thing: a known caller kind, a known permission exactly when
// the caller is a user, and a known place to be served.
func (r Requirement) validate() error {
	if _, known := Caller_name[int32(r.Caller)]; !known || r.Caller == Caller_CALLER_UNSPECIFIED {
		return fmt.Errorf("caller %s is not a valid caller", r.Caller)
	}
	if r.Caller == Caller_CALLER_USER {
		if _, known := Permission_name[int32(r.Permission)]; !known || r.Permission == Permission_PERMISSION_UNSPECIFIED {
			return fmt.Errorf("caller %s needs a valid permission, not %s", r.Caller, r.Permission)
		}
	} else if r.Permission != Permission_PERMISSION_UNSPECIFIED {
		return fmt.Errorf("caller %s takes no permission, but %s is declared", r.Caller, r.Permission)
	}
	if _, known := Serve_name[int32(r.Serve)]; !known || r.Serve == Serve_SERVE_UNSPECIFIED {
		return fmt.Errorf("serve %s names no curator to serve the method: declare SERVE_LEADER or SERVE_ANY", r.Serve)
	}
	if r.Unfenced && r.Serve != Serve_SERVE_ANY {
		return fmt.Errorf("unfenced is for SERVE_ANY methods only, not %s: the leader's view is never fenced", r.Serve)
	}
	return nil
}

// requirements caches MethodRequirement's answers by full method name.
// Only methods found with a valid declaration are cached, so the cache is
// bounded by the registered methods, whatever names callers send.
var requirements sync.Map // string -> Requirement

// MethodRequirement returns the requirement declared by the gRPC method
// fullMethod, in the form gRPC's interceptors see it
// (grpc.UnaryServerInfo.FullMethod, grpc.StreamServerInfo.FullMethod):
// "/polis.curator.v1.ManagementService/ApproveNode". It reads the method's
// authz option from the file descriptors registered with
// protoregistry.GlobalFiles, which hold every .proto file linked into the
// program.
//
// It fails if the method is unknown, declares no requirement, or declares
// one that is invalid (no caller, a user without a permission, a
// permission for a caller that is not a user, no place to be served). A server must refuse the
// call then: a method nobody declared a requirement for is callable by
// nobody.
func MethodRequirement(fullMethod string) (Requirement, error) {
	if r, ok := requirements.Load(fullMethod); ok {
		return r.(Requirement), nil
	}
	r, err := lookupRequirement(protoregistry.GlobalFiles, fullMethod)
	if err != nil {
		return Requirement{}, err
	}
	requirements.Store(fullMethod, r)
	return r, nil
}

// lookupRequirement is MethodRequirement over the descriptors in files,
// without the cache.
func lookupRequirement(files *protoregistry.Files, fullMethod string) (Requirement, error) {
	md, err := FindMethod(files, fullMethod)
	if err != nil {
		return Requirement{}, err
	}
	return methodRequirement(md)
}

// FindMethod returns the descriptor of the gRPC method fullMethod
// ("/package.Service/Method", as interceptors see it) among files. Every
// API whose methods declare their callers as options reads them through
// it (the curator's here, the node API's in api/node/v1).
func FindMethod(files *protoregistry.Files, fullMethod string) (protoreflect.MethodDescriptor, error) {
	service, method, ok := splitFullMethod(fullMethod)
	if !ok {
		return nil, fmt.Errorf("%q is not a full gRPC method name (/package.Service/Method)", fullMethod)
	}
	d, err := files.FindDescriptorByName(service)
	if err != nil {
		return nil, fmt.Errorf("method %s: service %s: %w", fullMethod, service, err)
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil, fmt.Errorf("method %s: %s is not a service", fullMethod, service)
	}
	md := sd.Methods().ByName(method)
	if md == nil {
		return nil, fmt.Errorf("method %s: service %s has no method %s", fullMethod, service, method)
	}
	return md, nil
}

// splitFullMethod splits "/package.Service/Method" into its service and
// method names, and reports whether fullMethod has that form.
func splitFullMethod(fullMethod string) (protoreflect.FullName, protoreflect.Name, bool) {
	rest, ok := strings.CutPrefix(fullMethod, "/")
	if !ok {
		return "", "", false
	}
	service, method, ok := strings.Cut(rest, "/")
	s, m := protoreflect.FullName(service), protoreflect.Name(method)
	if !ok || !s.IsValid() || !m.IsValid() {
		return "", "", false
	}
	return s, m, true
}

// methodRequirement reads and checks the requirement md declares.
func methodRequirement(md protoreflect.MethodDescriptor) (Requirement, error) {
	opts, _ := md.Options().(*descriptorpb.MethodOptions)
	if opts == nil || !proto.HasExtension(opts, E_Authz) {
		return Requirement{}, fmt.Errorf("method %s declares no requirement: add option (%s) to its rpc definition", md.FullName(), E_Authz.TypeDescriptor().FullName())
	}
	a, _ := proto.GetExtension(opts, E_Authz).(*AuthzRequirement)
	r := Requirement{Caller: a.GetCaller(), Permission: a.GetPermission(), Serve: a.GetServe(), Quiet: a.GetQuiet(), Unfenced: a.GetUnfenced()}
	if err := r.validate(); err != nil {
		return Requirement{}, fmt.Errorf("method %s declares an invalid requirement: %w", md.FullName(), err)
	}
	return r, nil
}
