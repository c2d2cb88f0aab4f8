package curatorv1

import (
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// polisMethods returns every method of every service in every registered
// .proto file of a polis.* package: the curator's API, and any other
// Polis API linked into this test.
func polisMethods(t *testing.T) []protoreflect.MethodDescriptor {
	t.Helper()
	var methods []protoreflect.MethodDescriptor
	protoregistry.GlobalFiles.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		if !strings.HasPrefix(string(fd.Package()), "polis.") {
			return true
		}
		for i := range fd.Services().Len() {
			sd := fd.Services().Get(i)
			for j := range sd.Methods().Len() {
				methods = append(methods, sd.Methods().Get(j))
			}
		}
		return true
	})
	if len(methods) == 0 {
		t.Fatal("found no methods in polis.* packages: are the generated files registered?")
	}
	return methods
}

// fullMethod is the name gRPC gives md in its interceptors.
func fullMethod(md protoreflect.MethodDescriptor) string {
	return "/" + string(md.Parent().FullName()) + "/" + string(md.Name())
}

// TestEveryMethodDeclaresRequirement is the guard: an RPC added without a
// valid authz option fails here (and would be refused by the curator).
func TestEveryMethodDeclaresRequirement(t *testing.T) {
	for _, md := range polisMethods(t) {
		if _, err := MethodRequirement(fullMethod(md)); err != nil {
			t.Errorf("%v", err)
		}
	}
}

func user(p Permission) Requirement {
	return Requirement{Caller: Caller_CALLER_USER, Permission: p}
}

var (
	unauthenticated = Requirement{Caller: Caller_CALLER_UNAUTHENTICATED}
	keyHolder       = Requirement{Caller: Caller_CALLER_KEY_HOLDER}
	anyNode         = Requirement{Caller: Caller_CALLER_NODE}
	nodeSelf        = Requirement{Caller: Caller_CALLER_NODE_SELF}
)

// atLeader and atAny complete a caller rule with where it is served.
func atLeader(r Requirement) Requirement { r.Serve = Serve_SERVE_LEADER; return r }
func atAny(r Requirement) Requirement    { r.Serve = Serve_SERVE_ANY; return r }

// quiet marks a rule whose successful calls leave no audit line;
// unfenced one served from a curator's node view without fencing it.
func quiet(r Requirement) Requirement    { r.Quiet = true; return r }
func unfenced(r Requirement) Requirement { r.Unfenced = true; return r }

// wantRequirements is the permission model, method by method. It repeats
// the .proto files on purpose: a change to who may call what must show up
// here too, where a reviewer sees it.
var wantRequirements = map[string]Requirement{
	CuratorService_Watch_FullMethodName:                   atAny(anyNode),
	CuratorService_UpdateNodeStatus_FullMethodName:        atLeader(nodeSelf),
	CuratorService_Heartbeat_FullMethodName:               unfenced(quiet(atAny(nodeSelf))),
	CuratorService_RenewCertificate_FullMethodName:        atLeader(nodeSelf),
	CuratorService_IssueKubeletCredentials_FullMethodName: atLeader(nodeSelf),
	CuratorService_Register_FullMethodName:                atLeader(keyHolder),
	CuratorService_CommitRegistration_FullMethodName:      atLeader(keyHolder),
	CuratorService_Join_FullMethodName:                    atLeader(keyHolder),
	CuratorService_GetLeader_FullMethodName:               quiet(atAny(unauthenticated)),
	CuratorService_WatchLeader_FullMethodName:             quiet(atAny(unauthenticated)),
	CuratorService_GetCACertificate_FullMethodName:        quiet(atAny(unauthenticated)),
	CuratorService_GetOwnerKey_FullMethodName:             atAny(anyNode),
	CuratorService_WatchClusterDirectory_FullMethodName:   atAny(anyNode),
	CuratorService_SetWireGuardKey_FullMethodName:         atLeader(nodeSelf),
	CuratorService_WatchNetworkPeers_FullMethodName:       atAny(nodeSelf),
	CuratorService_GetClusterPart_FullMethodName:          atLeader(keyHolder),

	ManagementService_GetClusterInfo_FullMethodName:             atAny(user(Permission_PERMISSION_READ_CLUSTER)),
	ManagementService_ListNodes_FullMethodName:                  atAny(user(Permission_PERMISSION_READ_CLUSTER)),
	ManagementService_GetRegisterTicket_FullMethodName:          atLeader(user(Permission_PERMISSION_GET_REGISTER_TICKET)),
	ManagementService_ApproveNode_FullMethodName:                atLeader(user(Permission_PERMISSION_APPROVE_NODE)),
	ManagementService_UpdateNodeRoles_FullMethodName:            atLeader(user(Permission_PERMISSION_UPDATE_NODE_ROLES)),
	ManagementService_DecommissionNode_FullMethodName:           atLeader(user(Permission_PERMISSION_DECOMMISSION_NODE)),
	ManagementService_DeleteNode_FullMethodName:                 atLeader(user(Permission_PERMISSION_DELETE_NODE)),
	ManagementService_UpdateNodeLabels_FullMethodName:           atLeader(user(Permission_PERMISSION_UPDATE_NODE_LABELS)),
	ManagementService_RotateRegisterTicket_FullMethodName:       atLeader(user(Permission_PERMISSION_ROTATE_REGISTER_TICKET)),
	ManagementService_IssueKubernetesCredentials_FullMethodName: atLeader(user(Permission_PERMISSION_ISSUE_KUBERNETES_ADMIN)),
	ManagementService_BackupCluster_FullMethodName:              atAny(user(Permission_PERMISSION_BACKUP_CLUSTER)),

	AAAService_TakeOwnership_FullMethodName:  atLeader(keyHolder),
	AAAService_RotateOwnerKey_FullMethodName: atLeader(user(Permission_PERMISSION_ROTATE_OWNER_KEY)),
}

func TestRequirements(t *testing.T) {
	seen := map[string]bool{}
	for _, md := range polisMethods(t) {
		name := fullMethod(md)
		seen[name] = true
		want, listed := wantRequirements[name]
		if !listed {
			t.Errorf("%s is not in wantRequirements: add it with the requirement its .proto declares", name)
			continue
		}
		got, err := MethodRequirement(name)
		if err != nil || got != want {
			t.Errorf("MethodRequirement(%s) = %v, %v; want %v", name, got, err, want)
		}
	}
	for name := range wantRequirements {
		if !seen[name] {
			t.Errorf("wantRequirements lists %s, which is not a method", name)
		}
	}
}

// TestServiceDescsResolve checks the names gRPC itself uses: every method
// of every generated grpc.ServiceDesc resolves, and every method in the
// descriptors is served by one of them.
func TestServiceDescsResolve(t *testing.T) {
	served := map[string]bool{}
	for _, sd := range []*grpc.ServiceDesc{&CuratorService_ServiceDesc, &ManagementService_ServiceDesc, &AAAService_ServiceDesc} {
		var names []string
		for _, m := range sd.Methods {
			names = append(names, m.MethodName)
		}
		for _, s := range sd.Streams {
			names = append(names, s.StreamName)
		}
		for _, n := range names {
			name := "/" + sd.ServiceName + "/" + n
			served[name] = true
			if _, err := MethodRequirement(name); err != nil {
				t.Errorf("%v", err)
			}
		}
	}
	for _, md := range polisMethods(t) {
		if !served[fullMethod(md)] {
			t.Errorf("%s is in no grpc.ServiceDesc this test knows: add its service to the list", fullMethod(md))
		}
	}
}

// TestNodeSelfRequestsNameNoNode checks the structural half of "a node may
// only update itself": the request of a CALLER_NODE_SELF method has no
// field, at any depth, that could name a node, so the node acted on can
// only be the one the caller's certificate names.
func TestNodeSelfRequestsNameNoNode(t *testing.T) {
	for _, md := range polisMethods(t) {
		r, err := MethodRequirement(fullMethod(md))
		if err != nil || r.Caller != Caller_CALLER_NODE_SELF {
			continue
		}
		for _, f := range nodeNamingFields(md.Input(), map[protoreflect.FullName]bool{}) {
			t.Errorf("%s is a node-self method, but its request has field %s, which names a node", md.FullName(), f)
		}
	}
}

// notANode are fields whose names suggest a node but that name none, each
// with why.
var notANode = map[protoreflect.FullName]bool{
	// The public half of the WireGuard key the caller made for its pod
	// network: stored for the caller, which its certificate names; it
	// identifies no node to the curator.
	"polis.curator.v1.SetWireGuardKeyRequest.wireguard_public_key": true,
}

// nodeNamingFields returns the fields in m and the messages it contains
// whose names suggest a node ID or key (but those of notANode).
func nodeNamingFields(m protoreflect.MessageDescriptor, visited map[protoreflect.FullName]bool) []protoreflect.FullName {
	if visited[m.FullName()] {
		return nil
	}
	visited[m.FullName()] = true
	var found []protoreflect.FullName
	for i := range m.Fields().Len() {
		f := m.Fields().Get(i)
		name := string(f.Name())
		if notANode[f.FullName()] {
			continue
		}
		if strings.Contains(name, "node_id") || strings.Contains(name, "public_key") {
			found = append(found, f.FullName())
		}
		if f.Message() != nil {
			found = append(found, nodeNamingFields(f.Message(), visited)...)
		}
	}
	return found
}

// TestManagementIsForUsers checks the rule ManagementService's doc states:
// every call needs a user and a permission.
func TestManagementIsForUsers(t *testing.T) {
	for _, md := range polisMethods(t) {
		if md.Parent().FullName() != "polis.curator.v1.ManagementService" {
			continue
		}
		if r, err := MethodRequirement(fullMethod(md)); err != nil || r.Caller != Caller_CALLER_USER {
			t.Errorf("%s: requirement %v, %v; every Management call must be CALLER_USER", md.FullName(), r, err)
		}
	}
}

// testFiles builds a registry holding one service, polis.authztest.Test,
// with one method per entry of decls: none (a nil entry) or the given
// authz option.
func testFiles(t *testing.T, decls map[string]*AuthzRequirement) *protoregistry.Files {
	t.Helper()
	fdp := &descriptorpb.FileDescriptorProto{
		Name:    proto.String("polis/authztest/test.proto"),
		Package: proto.String("polis.authztest"),
		Syntax:  proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{
			{Name: proto.String("Empty")},
		},
		Service: []*descriptorpb.ServiceDescriptorProto{{Name: proto.String("Test")}},
	}
	for name, decl := range decls {
		m := &descriptorpb.MethodDescriptorProto{
			Name:       proto.String(name),
			InputType:  proto.String(".polis.authztest.Empty"),
			OutputType: proto.String(".polis.authztest.Empty"),
		}
		if decl != nil {
			m.Options = &descriptorpb.MethodOptions{}
			proto.SetExtension(m.Options, E_Authz, decl)
		}
		fdp.Service[0].Method = append(fdp.Service[0].Method, m)
	}
	fd, err := protodesc.NewFile(fdp, protoregistry.GlobalFiles)
	if err != nil {
		t.Fatalf("building test descriptor: %v", err)
	}
	files := &protoregistry.Files{}
	if err := files.RegisterFile(fd); err != nil {
		t.Fatalf("registering test descriptor: %v", err)
	}
	return files
}

func TestInvalidDeclarationsRefused(t *testing.T) {
	const leader, anywhere = Serve_SERVE_LEADER, Serve_SERVE_ANY
	files := testFiles(t, map[string]*AuthzRequirement{
		"Valid":             {Caller: Caller_CALLER_NODE_SELF, Serve: leader},
		"ValidUser":         {Caller: Caller_CALLER_USER, Permission: Permission_PERMISSION_DELETE_NODE, Serve: leader},
		"ValidAnywhere":     {Caller: Caller_CALLER_NODE, Serve: anywhere},
		"Undeclared":        nil,
		"Empty":             {},
		"UserNoPermission":  {Caller: Caller_CALLER_USER, Serve: leader},
		"NodeAndPermission": {Caller: Caller_CALLER_NODE, Permission: Permission_PERMISSION_READ_CLUSTER, Serve: leader},
		"PermissionOnly":    {Permission: Permission_PERMISSION_READ_CLUSTER, Serve: leader},
		"UnknownCaller":     {Caller: Caller(99), Serve: leader},
		"UnknownPermission": {Caller: Caller_CALLER_USER, Permission: Permission(99), Serve: leader},
		"NoServe":           {Caller: Caller_CALLER_NODE},
		"UnknownServe":      {Caller: Caller_CALLER_USER, Permission: Permission_PERMISSION_DELETE_NODE, Serve: Serve(99)},
		"UnfencedAtLeader":  {Caller: Caller_CALLER_NODE, Serve: leader, Unfenced: true},
		"QuietUnfenced":     {Caller: Caller_CALLER_NODE_SELF, Serve: anywhere, Quiet: true, Unfenced: true},
	})
	for method, want := range map[string]string{
		"Undeclared":        "declares no requirement",
		"Empty":             "is not a valid caller",
		"UserNoPermission":  "needs a valid permission",
		"NodeAndPermission": "takes no permission",
		"PermissionOnly":    "is not a valid caller",
		"UnknownCaller":     "is not a valid caller",
		"UnknownPermission": "needs a valid permission",
		"NoServe":           "names no curator to serve",
		"UnknownServe":      "names no curator to serve",
		"UnfencedAtLeader":  "unfenced is for SERVE_ANY methods only",
	} {
		r, err := lookupRequirement(files, "/polis.authztest.Test/"+method)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, %v; want an error containing %q", method, r, err, want)
		}
	}
	for method, want := range map[string]Requirement{
		"Valid":         atLeader(nodeSelf),
		"ValidUser":     atLeader(user(Permission_PERMISSION_DELETE_NODE)),
		"ValidAnywhere": atAny(anyNode),
		"QuietUnfenced": unfenced(quiet(atAny(nodeSelf))),
	} {
		if r, err := lookupRequirement(files, "/polis.authztest.Test/"+method); err != nil || r != want {
			t.Errorf("%s: got %v, %v; want %v", method, r, err, want)
		}
	}
}

func TestBadMethodNamesRefused(t *testing.T) {
	for _, name := range []string{
		"",
		"/",
		"//",
		"polis.curator.v1.CuratorService/Watch", // no leading slash
		"/polis.curator.v1.CuratorService/",     // no method
		"/polis.curator.v1.CuratorService",      // no method
		"/polis.curator.v1.CuratorService/Watch/", // trailing slash
		"/polis.curator.v1.CuratorService/Nope",   // unknown method
		"/polis.curator.v1.NopeService/Watch",     // unknown service
		"/polis.curator.v1.Node/Watch",            // a message, not a service
		"/polis.curator.v1.CuratorService.Watch",  // dot instead of slash
		"/polis.curator.v1.CuratorService/Watch\n",
	} {
		if r, err := MethodRequirement(name); err == nil {
			t.Errorf("MethodRequirement(%q) = %v, want an error", name, r)
		}
	}
}

func TestRequirementString(t *testing.T) {
	for r, want := range map[Requirement]string{
		atAny(unauthenticated): "unauthenticated at any curator",
		atLeader(keyHolder):    "key holder at the leader",
		atAny(anyNode):         "node at any curator",
		atLeader(nodeSelf):     "node self at the leader",
		atLeader(user(Permission_PERMISSION_APPROVE_NODE)): "user with PERMISSION_APPROVE_NODE at the leader",
		{}: "invalid requirement (caller CALLER_UNSPECIFIED, permission PERMISSION_UNSPECIFIED) served nowhere (SERVE_UNSPECIFIED)",
	} {
		if got := r.String(); got != want {
			t.Errorf("%#v.String() = %q, want %q", r, got, want)
		}
	}
}

func BenchmarkMethodRequirement(b *testing.B) {
	for b.Loop() {
		if _, err := MethodRequirement(ManagementService_ApproveNode_FullMethodName); err != nil {
			b.Fatal(err)
		}
	}
}
