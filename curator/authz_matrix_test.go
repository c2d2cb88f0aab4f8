package curator

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/identity"
)

// The authorization matrix: every RPC of the curator's three services,
// called by every kind of caller, with the cells that must be served and
// those that must be refused. A call counts as refused when it ends with
// PERMISSION_DENIED or UNAUTHENTICATED, or its connection is refused in
// the handshake (UNAVAILABLE: the curator of this test always leads, so
// nothing else answers that); any other outcome (success, or a refusal of
// the request's contents, such as NOT_FOUND for a node that does not
// exist) means the caller got through to the handler's business.
//
// An RPC without a row fails the test, so no RPC ships without someone
// deciding, here, who may call it.

// callerKind is a row of the matrix's other axis.
type callerKind string

const (
	anonymousCaller      callerKind = "anonymous"
	keyHolderCaller      callerKind = "key holder (unknown key)"
	newNodeCaller        callerKind = "NEW node (key holder)"
	standbyNodeCaller    callerKind = "STANDBY node (key holder)"
	upNodeCaller         callerKind = "UP node"
	decommissionedCaller callerKind = "DECOMMISSIONED node"
	deletedCaller        callerKind = "deleted node"
	ownerCaller          callerKind = "owner"
	revokedOwnerCaller   callerKind = "owner certificate of a rotated-away key"
	otherUserCaller      callerKind = "another user"
	expiredCaller        callerKind = "expired node certificate"
	otherCACaller        callerKind = "node certificate of another CA"
)

var allCallers = []callerKind{anonymousCaller, keyHolderCaller, newNodeCaller, standbyNodeCaller, upNodeCaller, decommissionedCaller, deletedCaller, ownerCaller, revokedOwnerCaller, otherUserCaller, expiredCaller, otherCACaller}

func callers(ks ...callerKind) map[callerKind]bool {
	m := map[callerKind]bool{}
	for _, k := range ks {
		m[k] = true
	}
	return m
}

var (
	// Everyone who completes a handshake.
	anyoneConnected = callers(anonymousCaller, keyHolderCaller, newNodeCaller, standbyNodeCaller, upNodeCaller, decommissionedCaller, deletedCaller, ownerCaller, revokedOwnerCaller, otherUserCaller)
	// Every key holder whose key is not retired or decommissioned; for a
	// user or an UP node, its certificate proves its key too.
	liveKeyHolders = callers(keyHolderCaller, newNodeCaller, standbyNodeCaller, upNodeCaller, ownerCaller, revokedOwnerCaller, otherUserCaller)
	onlyUpNode     = callers(upNodeCaller)
	onlyOwner      = callers(ownerCaller)
)

// authzMatrix is who gets through to each RPC.
var authzMatrix = map[string]map[callerKind]bool{
	cpb.CuratorService_GetLeader_FullMethodName:          anyoneConnected,
	cpb.CuratorService_WatchLeader_FullMethodName:        anyoneConnected,
	cpb.CuratorService_GetCACertificate_FullMethodName:   anyoneConnected,
	cpb.CuratorService_GetOwnerKey_FullMethodName:        onlyUpNode,
	cpb.CuratorService_Register_FullMethodName:           liveKeyHolders,
	cpb.CuratorService_CommitRegistration_FullMethodName: liveKeyHolders,
	cpb.CuratorService_Join_FullMethodName:               liveKeyHolders,
	// A key gets its own node's part only, and the handler refuses every
	// key that is not an UP node's (rpc_clusterpart_test.go).
	cpb.CuratorService_GetClusterPart_FullMethodName:        liveKeyHolders,
	cpb.CuratorService_Watch_FullMethodName:                 onlyUpNode,
	cpb.CuratorService_WatchClusterDirectory_FullMethodName: onlyUpNode,
	cpb.CuratorService_UpdateNodeStatus_FullMethodName:      onlyUpNode,
	cpb.CuratorService_Heartbeat_FullMethodName:             onlyUpNode,
	cpb.CuratorService_RenewCertificate_FullMethodName:      onlyUpNode,
	// A node for itself alone; the handler then wants KubernetesWorker.
	cpb.CuratorService_IssueKubeletCredentials_FullMethodName: onlyUpNode,
	// A node's own key and its own view of the pod network.
	cpb.CuratorService_SetWireGuardKey_FullMethodName:   onlyUpNode,
	cpb.CuratorService_WatchNetworkPeers_FullMethodName: onlyUpNode,

	cpb.ManagementService_GetClusterInfo_FullMethodName:       onlyOwner,
	cpb.ManagementService_ListNodes_FullMethodName:            onlyOwner,
	cpb.ManagementService_GetRegisterTicket_FullMethodName:    onlyOwner,
	cpb.ManagementService_RotateRegisterTicket_FullMethodName: onlyOwner,
	cpb.ManagementService_ApproveNode_FullMethodName:          onlyOwner,
	cpb.ManagementService_UpdateNodeRoles_FullMethodName:      onlyOwner,
	cpb.ManagementService_DecommissionNode_FullMethodName:     onlyOwner,
	cpb.ManagementService_DeleteNode_FullMethodName:           onlyOwner,
	cpb.ManagementService_UpdateNodeLabels_FullMethodName:     onlyOwner,
	// Kubernetes' superuser: the owner alone, never a delegate.
	cpb.ManagementService_IssueKubernetesCredentials_FullMethodName: onlyOwner,
	// The whole cluster state, the CA key included: the owner alone.
	cpb.ManagementService_BackupCluster_FullMethodName: onlyOwner,

	cpb.AAAService_TakeOwnership_FullMethodName:  onlyOwner,
	cpb.AAAService_RotateOwnerKey_FullMethodName: onlyOwner,
}

// curatorMethods lists every method of the curator's services, from their
// descriptors: what the server registers.
func curatorMethods() map[string]protoreflect.MethodDescriptor {
	out := map[string]protoreflect.MethodDescriptor{}
	for _, fd := range []protoreflect.FileDescriptor{cpb.File_polis_curator_v1_curator_proto, cpb.File_polis_curator_v1_management_proto, cpb.File_polis_curator_v1_aaa_proto} {
		for i := range fd.Services().Len() {
			sd := fd.Services().Get(i)
			for j := range sd.Methods().Len() {
				md := sd.Methods().Get(j)
				out["/"+string(sd.FullName())+"/"+string(md.Name())] = md
			}
		}
	}
	return out
}

func TestAuthorizationMatrix(t *testing.T) {
	methods := curatorMethods()
	for _, name := range slices.Sorted(maps.Keys(methods)) {
		if _, ok := authzMatrix[name]; !ok {
			t.Errorf("%s has no row in authzMatrix: decide who may call it", name)
		}
	}
	for name := range authzMatrix {
		if _, ok := methods[name]; !ok {
			t.Errorf("authzMatrix has a row for %s, which is not a method", name)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	c := newTestCluster(t)
	conns := c.matrixCallers(t, c)
	for _, name := range slices.Sorted(maps.Keys(methods)) {
		md := methods[name]
		for _, who := range allCallers {
			err := c.callForMatrix(name, md, conns[who])
			code := status.Code(err)
			refused := code == codes.PermissionDenied || code == codes.Unauthenticated || code == codes.Unavailable
			if want := authzMatrix[name][who]; refused == want {
				t.Errorf("%s as %s: %v; want served = %t", name, who, err, want)
			}
		}
	}
}

// TestServedWhereDeclared is the matrix's other half: where each RPC is
// answered. Every RPC declares SERVE_LEADER or SERVE_ANY
// (curatorv1.Requirement.Serve; api/curator/v1 fails for one that does
// not), and a follower called by a caller the RPC admits serves exactly the
// SERVE_ANY ones and answers the others UNAVAILABLE, naming the leader.
func TestServedWhereDeclared(t *testing.T) {
	c := newTestCluster(t)
	f := c.startFollower()
	follower := c.at(followerAddress(t, f))
	conns := c.matrixCallers(t, follower)
	methods := curatorMethods()
	for _, name := range slices.Sorted(maps.Keys(methods)) {
		req, err := cpb.MethodRequirement(name)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		// One caller the method admits (the matrix says which).
		var who callerKind
		for _, k := range allCallers {
			if authzMatrix[name][k] {
				who = k
				break
			}
		}
		err = c.callForMatrix(name, methods[name], conns[who])
		code := status.Code(err)
		switch req.Serve {
		case cpb.Serve_SERVE_ANY:
			if code == codes.PermissionDenied || code == codes.Unauthenticated || code == codes.Unavailable {
				t.Errorf("%s (%s) as %s at a follower: %v; want it served", name, req, who, err)
			}
		case cpb.Serve_SERVE_LEADER:
			if code != codes.Unavailable || !strings.Contains(err.Error(), "not the leader: the leader is "+c.curator.nodeID) {
				t.Errorf("%s (%s) as %s at a follower: %v; want UNAVAILABLE naming the leader", name, req, who, err)
			}
		default:
			t.Errorf("%s declares serve %s", name, req.Serve)
		}
	}
}

// matrixCallers makes a connection to the curator at's dial helpers call
// for every kind of caller; the callers are made through c.
func (c *testCluster) matrixCallers(t *testing.T, at *testCluster) map[callerKind]*grpc.ClientConn {
	m := c.management()
	register := func(key ed25519.PrivateKey) string {
		resp, err := cpb.NewCuratorServiceClient(c.asKeyHolder(key)).Register(ctxT(t), &cpb.RegisterRequest{RegisterTicket: c.registerTicket()})
		if err != nil {
			t.Fatalf("Register: %v", err)
		}
		return resp.NodeId
	}
	newKey, standbyKey := mustKey(t), mustKey(t)
	register(newKey)
	c.forceNodeState(register(standbyKey), cpb.NodeState_NODE_STATE_STANDBY)
	upKey, upCert := c.enrolNode(&cpb.NodeStatus{ExternalAddress: "127.0.0.80"})
	decKey, decCert := c.enrolNode(&cpb.NodeStatus{ExternalAddress: "127.0.0.81"})
	c.forceNodeState(identity.NodeID(decKey.Public().(ed25519.PublicKey)), cpb.NodeState_NODE_STATE_DECOMMISSIONED)
	delKey, delCert := c.enrolNode(&cpb.NodeStatus{ExternalAddress: "127.0.0.82"})
	delID := identity.NodeID(delKey.Public().(ed25519.PublicKey))
	c.forceNodeState(delID, cpb.NodeState_NODE_STATE_DECOMMISSIONED)
	if _, err := m.DeleteNode(ctxT(t), &cpb.DeleteNodeRequest{NodeId: delID}); err != nil {
		t.Fatal(err)
	}
	c.waitCachedNode(delID, func(n *cpb.Node) bool { return n == nil })

	aliceKey := mustKey(t)
	alice, err := c.ca.IssueUser("alice", aliceKey.Public().(ed25519.PublicKey), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// An owner certificate for a key that is not (any more) the owner key.
	formerKey := mustKey(t)
	former, err := c.ca.IssueUser(OwnerUserName, formerKey.Public().(ed25519.PublicKey), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// Certificates the server refuses in the handshake, presented
	// without the client-side checks identity's configurations make.
	raw := func(cert *x509.Certificate, key ed25519.PrivateKey) *grpc.ClientConn {
		tc, err := identity.TLSCertificate(cert, key)
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AddCert(c.ca.Certificate())
		return at.dial(&tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool, Certificates: []tls.Certificate{tc}})
	}
	expired, err := c.ca.IssueNode(upKey.Public().(ed25519.PublicKey), time.Now().Add(-2*identity.NodeCertificateLifetime))
	if err != nil {
		t.Fatal(err)
	}
	otherCA, err := identity.NewCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := otherCA.IssueNode(upKey.Public().(ed25519.PublicKey), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return map[callerKind]*grpc.ClientConn{
		anonymousCaller:      at.anonymous(),
		keyHolderCaller:      at.asKeyHolder(mustKey(t)),
		newNodeCaller:        at.asKeyHolder(newKey),
		standbyNodeCaller:    at.asKeyHolder(standbyKey),
		upNodeCaller:         at.asNode(upCert, upKey),
		decommissionedCaller: at.asNode(decCert, decKey),
		deletedCaller:        at.asNode(delCert, delKey),
		ownerCaller:          at.asOwner(),
		revokedOwnerCaller:   at.asUserCert(former, formerKey),
		otherUserCaller:      at.asUserCert(alice, aliceKey),
		expiredCaller:        raw(expired, upKey),
		otherCACaller:        raw(foreign, upKey),
	}
}

// unknownNodeID is a well-formed node ID no node has: management calls
// that name it get through to their handler and change nothing.
const unknownNodeID = "node-000000000000000000000000"

// callForMatrix calls method with a request that changes nothing that
// matters to the other cells: management calls name a node that does not
// exist, Register carries the current ticket, the rest are empty.
func (c *testCluster) callForMatrix(method string, md protoreflect.MethodDescriptor, conn *grpc.ClientConn) error {
	req := dynamicpb.NewMessage(md.Input())
	fields := md.Input().Fields()
	if f := fields.ByName("node_id"); f != nil && f.Kind() == protoreflect.StringKind {
		req.Set(f, protoreflect.ValueOfString(unknownNodeID))
	}
	if f := fields.ByName("register_ticket"); f != nil {
		req.Set(f, protoreflect.ValueOfBytes(c.registerTicket()))
	}
	ctx, cancel := context.WithTimeout(ctxT(c.t), testCallTimeout)
	defer cancel()
	return invokeDynamic(ctx, conn, method, md, req)
}

// testCallTimeout bounds one call of the matrix, generously: a refused
// handshake fails at once, and every served call returns without waiting
// for anything but etcd.
const testCallTimeout = 30 * time.Second
