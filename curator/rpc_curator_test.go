package curator

import (
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/supervisor/supervisortest"
)

// registerTicket reads the cluster's register ticket from the store.
func (c *testCluster) registerTicket() []byte {
	c.t.Helper()
	resp, err := c.etcd.Get(ctxT(c.t), ticketKey)
	if err != nil || len(resp.Kvs) != 1 {
		c.t.Fatalf("reading the register ticket: %v, %d keys", err, len(resp.Kvs))
	}
	return resp.Kvs[0].Value
}

// forceNodeState sets a node's state straight in the store, as an
// operator's call would, and waits until the curator's node cache (which
// authorises callers) has seen it.
func (c *testCluster) forceNodeState(id string, state cpb.NodeState) {
	c.t.Helper()
	l, err := event.Get(ctxT(c.t), &c.curator.leader)
	if err != nil || l == nil {
		c.t.Fatalf("no leader state: %v", err)
	}
	if _, err := updateNode(ctxT(c.t), l.leadership, c.etcd, id, func(n *cpb.Node) (*cpb.Node, error) {
		if n == nil {
			return nil, errors.New("no such node")
		}
		n.State = state
		return n, nil
	}); err != nil {
		c.t.Fatalf("setting node %s to %v: %v", id, state, err)
	}
	c.waitCachedNode(id, func(n *cpb.Node) bool { return n != nil && n.State == state })
}

// waitCachedNode waits until the node cache's record of id (nil if none)
// satisfies pred.
func (c *testCluster) waitCachedNode(id string, pred func(*cpb.Node) bool) {
	c.t.Helper()
	if _, err := event.Get(ctxT(c.t), c.curator.nodes.Snapshots(), event.Filter(func(s *nodeSnapshot) bool {
		return s.complete && pred(s.nodes[id])
	})); err != nil {
		c.t.Fatalf("waiting for the node cache's record of %s: %v", id, err)
	}
}

// storedNode reads a node's record from the store.
func (c *testCluster) storedNode(id string) *cpb.Node {
	c.t.Helper()
	n, _, err := getNode(ctxT(c.t), c.etcd, id)
	if err != nil {
		c.t.Fatal(err)
	}
	return n
}

// enrolNode takes a new node through registration (register, approval,
// commit) and returns its key and certificate.
func (c *testCluster) enrolNode(st *cpb.NodeStatus) (ed25519.PrivateKey, *x509.Certificate) {
	c.t.Helper()
	key := mustKey(c.t)
	cur := cpb.NewCuratorServiceClient(c.asKeyHolder(key))
	reg, err := cur.Register(ctxT(c.t), &cpb.RegisterRequest{RegisterTicket: c.registerTicket(), Status: st})
	if err != nil {
		c.t.Fatalf("Register: %v", err)
	}
	c.forceNodeState(reg.NodeId, cpb.NodeState_NODE_STATE_STANDBY)
	resp, err := cur.CommitRegistration(ctxT(c.t), &cpb.CommitRegistrationRequest{})
	if err != nil {
		c.t.Fatalf("CommitRegistration: %v", err)
	}
	cert, err := x509.ParseCertificate(resp.NodeCertificate)
	if err != nil {
		c.t.Fatal(err)
	}
	return key, cert
}

func wantCode(t *testing.T, what string, err error, want codes.Code) {
	t.Helper()
	if status.Code(err) != want {
		t.Fatalf("%s: %v, want %v", what, err, want)
	}
}

func TestRegistration(t *testing.T) {
	c := newTestCluster(t)
	// The first node reports a running curator, so that the directory a
	// new node receives names it.
	curatorPort := uint32(c.status.Address.Port())
	firstIP := c.status.Address.Addr().String()
	if _, err := cpb.NewCuratorServiceClient(c.asFirstNode()).UpdateNodeStatus(ctxT(t), &cpb.UpdateNodeStatusRequest{
		Status: &cpb.NodeStatus{ExternalAddress: firstIP, RunningCurator: &cpb.RunningCurator{Port: curatorPort}},
	}); err != nil {
		t.Fatalf("UpdateNodeStatus: %v", err)
	}

	key := mustKey(t)
	id := identity.NodeID(key.Public().(ed25519.PublicKey))
	kh := cpb.NewCuratorServiceClient(c.asKeyHolder(key))
	ticket := c.registerTicket()
	st := &cpb.NodeStatus{ExternalAddress: "127.0.0.42", Version: "v0.1.0"}

	// Refusals change nothing.
	wrong := append([]byte(nil), ticket...)
	wrong[0] ^= 1
	_, err := kh.Register(ctxT(t), &cpb.RegisterRequest{RegisterTicket: wrong, Status: st})
	wantCode(t, "Register with a wrong ticket", err, codes.PermissionDenied)
	_, err = kh.Register(ctxT(t), &cpb.RegisterRequest{Status: st})
	wantCode(t, "Register without a ticket", err, codes.InvalidArgument)
	_, err = kh.Register(ctxT(t), &cpb.RegisterRequest{RegisterTicket: ticket, Status: &cpb.NodeStatus{ExternalAddress: "not-an-ip"}})
	wantCode(t, "Register with a malformed address", err, codes.InvalidArgument)
	if n := c.storedNode(id); n != nil {
		t.Fatalf("refused registrations stored %v", n)
	}
	_, err = kh.CommitRegistration(ctxT(t), &cpb.CommitRegistrationRequest{})
	wantCode(t, "CommitRegistration before Register", err, codes.NotFound)

	reg, err := kh.Register(ctxT(t), &cpb.RegisterRequest{RegisterTicket: ticket, Status: st})
	if err != nil {
		t.Fatalf("Register: %v", err)
	}
	if reg.NodeId != id {
		t.Fatalf("Register gave node ID %s, want %s", reg.NodeId, id)
	}
	if n := c.storedNode(id); n.State != cpb.NodeState_NODE_STATE_NEW || !proto.Equal(n.Status, st) {
		t.Fatalf("after Register: %v", n)
	}
	// A retry succeeds and changes nothing.
	if _, err := kh.Register(ctxT(t), &cpb.RegisterRequest{RegisterTicket: ticket, Status: st}); err != nil {
		t.Fatalf("Register again: %v", err)
	}
	_, err = kh.CommitRegistration(ctxT(t), &cpb.CommitRegistrationRequest{})
	wantCode(t, "CommitRegistration before approval", err, codes.FailedPrecondition)
	if n := c.storedNode(id); n.State != cpb.NodeState_NODE_STATE_NEW {
		t.Fatalf("refused commit changed the state to %v", n.State)
	}
	// A registered node is not a node yet.
	_, err = kh.Heartbeat(ctxT(t), &cpb.HeartbeatRequest{})
	wantCode(t, "Heartbeat as a key holder", err, codes.PermissionDenied)

	c.forceNodeState(id, cpb.NodeState_NODE_STATE_STANDBY)
	if _, err := kh.Register(ctxT(t), &cpb.RegisterRequest{RegisterTicket: ticket, Status: st}); err != nil {
		t.Fatalf("Register when STANDBY: %v", err)
	}
	if n := c.storedNode(id); n.State != cpb.NodeState_NODE_STATE_STANDBY {
		t.Fatalf("Register when STANDBY changed the state to %v", n.State)
	}
	commit, err := kh.CommitRegistration(ctxT(t), &cpb.CommitRegistrationRequest{})
	if err != nil {
		t.Fatalf("CommitRegistration: %v", err)
	}
	if n := c.storedNode(id); n.State != cpb.NodeState_NODE_STATE_UP {
		t.Fatalf("after CommitRegistration: %v", n.State)
	}
	cert, err := x509.ParseCertificate(commit.NodeCertificate)
	if err != nil {
		t.Fatal(err)
	}
	// A node certificate names no address: what a node reports about
	// itself is in no certificate.
	if cert.Subject.CommonName != id || len(cert.IPAddresses)+len(cert.DNSNames) != 0 {
		t.Fatalf("certificate for %s naming %v %v", cert.Subject.CommonName, cert.IPAddresses, cert.DNSNames)
	}
	dir := commit.ClusterDirectory
	wantCurator := &cpb.CuratorEndpoint{NodeId: c.status.NodeID, Address: firstIP, Port: curatorPort}
	if len(dir.GetCurators()) != 1 || !proto.Equal(dir.Curators[0], wantCurator) || string(dir.CaCertificate) != string(c.ca.Certificate().Raw) {
		t.Fatalf("directory %v, want the first node's curator %v and the CA", dir, wantCurator)
	}

	// The certificate works at once: the node is a node.
	node := cpb.NewCuratorServiceClient(c.asNode(cert, key))
	hb, err := node.Heartbeat(ctxT(t), &cpb.HeartbeatRequest{})
	if err != nil {
		t.Fatalf("Heartbeat with the committed certificate: %v", err)
	}
	if hb.Interval.AsDuration() != DefaultHeartbeatInterval {
		t.Fatalf("heartbeat interval %v, want %v", hb.Interval.AsDuration(), DefaultHeartbeatInterval)
	}

	// Retries after the node is UP: committing again gives a fresh
	// certificate, registering is refused.
	if _, err := kh.CommitRegistration(ctxT(t), &cpb.CommitRegistrationRequest{}); err != nil {
		t.Fatalf("CommitRegistration when UP: %v", err)
	}
	_, err = kh.Register(ctxT(t), &cpb.RegisterRequest{RegisterTicket: ticket, Status: st})
	wantCode(t, "Register when UP", err, codes.AlreadyExists)
}

func TestJoinAfterReboot(t *testing.T) {
	c := newTestCluster(t)
	key, _ := c.enrolNode(&cpb.NodeStatus{ExternalAddress: "127.0.0.43"})
	id := identity.NodeID(key.Public().(ed25519.PublicKey))

	// A reboot: the node has only its key, and a new connection.
	joined, err := cpb.NewCuratorServiceClient(c.asKeyHolder(key)).Join(ctxT(t), &cpb.JoinRequest{})
	if err != nil {
		t.Fatalf("Join: %v", err)
	}
	cert, err := x509.ParseCertificate(joined.NodeCertificate)
	if err != nil {
		t.Fatal(err)
	}
	if cert.Subject.CommonName != id || string(joined.ClusterDirectory.GetCaCertificate()) != string(c.ca.Certificate().Raw) {
		t.Fatalf("Join gave a certificate for %s and directory %v", cert.Subject.CommonName, joined.ClusterDirectory)
	}
	node := cpb.NewCuratorServiceClient(c.asNode(cert, key))
	if _, err := node.Heartbeat(ctxT(t), &cpb.HeartbeatRequest{}); err != nil {
		t.Fatalf("Heartbeat after Join: %v", err)
	}
	renewed, err := node.RenewCertificate(ctxT(t), &cpb.RenewCertificateRequest{})
	if err != nil {
		t.Fatalf("RenewCertificate: %v", err)
	}
	rc, err := x509.ParseCertificate(renewed.NodeCertificate)
	if err != nil {
		t.Fatal(err)
	}
	if rc.Subject.CommonName != id || !rc.PublicKey.(ed25519.PublicKey).Equal(key.Public()) || string(renewed.CaCertificate) != string(c.ca.Certificate().Raw) {
		t.Fatalf("renewed certificate for %s", rc.Subject.CommonName)
	}
	// Beside it, the serving certificate of the node's API, for the same
	// key, naming the node ID and the address the record reports.
	api, err := x509.ParseCertificate(renewed.NodeApiCertificate)
	if err != nil {
		t.Fatalf("the node API certificate: %v", err)
	}
	if !api.PublicKey.(ed25519.PublicKey).Equal(key.Public()) || api.CheckSignatureFrom(c.ca.Certificate()) != nil {
		t.Fatalf("node API certificate for %s, not this node's from the cluster CA", api.Subject.CommonName)
	}
	for _, name := range []string{id, "127.0.0.43"} {
		if err := api.VerifyHostname(name); err != nil {
			t.Errorf("the node API certificate: %v", err)
		}
	}
	// An address another node's record reports too is named for neither.
	c.enrolNode(&cpb.NodeStatus{ExternalAddress: "127.0.0.43"})
	renewed, err = node.RenewCertificate(ctxT(t), &cpb.RenewCertificateRequest{})
	if err != nil {
		t.Fatalf("RenewCertificate: %v", err)
	}
	if api, err = x509.ParseCertificate(renewed.NodeApiCertificate); err != nil {
		t.Fatal(err)
	}
	if err := api.VerifyHostname(id); err != nil || len(api.IPAddresses) != 0 {
		t.Errorf("node API certificate with the address claimed twice: names %v and %v, want only %s", api.DNSNames, api.IPAddresses, id)
	}

	// Nodes that are not UP cannot join.
	unknown := cpb.NewCuratorServiceClient(c.asKeyHolder(mustKey(t)))
	_, err = unknown.Join(ctxT(t), &cpb.JoinRequest{})
	wantCode(t, "Join with an unknown key", err, codes.NotFound)
	newKey := mustKey(t)
	newNode := cpb.NewCuratorServiceClient(c.asKeyHolder(newKey))
	if _, err := newNode.Register(ctxT(t), &cpb.RegisterRequest{RegisterTicket: c.registerTicket()}); err != nil {
		t.Fatal(err)
	}
	_, err = newNode.Join(ctxT(t), &cpb.JoinRequest{})
	wantCode(t, "Join of a NEW node", err, codes.FailedPrecondition)
}

// A node's certificate is necessary, never sufficient: decommissioned and
// deleted nodes are refused with theirs.
func TestDecommissionedAndDeletedNodesRefused(t *testing.T) {
	c := newTestCluster(t)
	key, cert := c.enrolNode(&cpb.NodeStatus{ExternalAddress: "127.0.0.44"})
	id := identity.NodeID(key.Public().(ed25519.PublicKey))
	node := cpb.NewCuratorServiceClient(c.asNode(cert, key))
	kh := cpb.NewCuratorServiceClient(c.asKeyHolder(key))
	if _, err := node.Heartbeat(ctxT(t), &cpb.HeartbeatRequest{}); err != nil {
		t.Fatalf("Heartbeat while UP: %v", err)
	}

	c.forceNodeState(id, cpb.NodeState_NODE_STATE_DECOMMISSIONED)
	_, err := node.Heartbeat(ctxT(t), &cpb.HeartbeatRequest{})
	wantCode(t, "Heartbeat when decommissioned", err, codes.PermissionDenied)
	_, err = node.UpdateNodeStatus(ctxT(t), &cpb.UpdateNodeStatusRequest{Status: &cpb.NodeStatus{ExternalAddress: "127.0.0.45"}})
	wantCode(t, "UpdateNodeStatus when decommissioned", err, codes.PermissionDenied)
	_, err = node.RenewCertificate(ctxT(t), &cpb.RenewCertificateRequest{})
	wantCode(t, "RenewCertificate when decommissioned", err, codes.PermissionDenied)
	w, err := node.Watch(ctxT(t), &cpb.WatchRequest{Target: &cpb.WatchRequest_AllNodes{AllNodes: &cpb.AllNodes{}}})
	if err == nil {
		_, err = w.Recv()
	}
	wantCode(t, "Watch when decommissioned", err, codes.PermissionDenied)
	// The node tells this refusal from others by its detail: it means "no
	// roles any more", for good.
	if !IsNodeDecommissioned(fmt.Errorf("wrapped: %w", err)) {
		t.Errorf("Watch when decommissioned: IsNodeDecommissioned(%v) = false", err)
	}
	_, err = node.Heartbeat(ctxT(t), &cpb.HeartbeatRequest{})
	if !IsNodeDecommissioned(err) {
		t.Errorf("Heartbeat when decommissioned: IsNodeDecommissioned(%v) = false", err)
	}
	_, err = kh.Join(ctxT(t), &cpb.JoinRequest{})
	wantCode(t, "Join when decommissioned", err, codes.PermissionDenied)
	_, err = kh.CommitRegistration(ctxT(t), &cpb.CommitRegistrationRequest{})
	wantCode(t, "CommitRegistration when decommissioned", err, codes.PermissionDenied)
	_, err = kh.Register(ctxT(t), &cpb.RegisterRequest{RegisterTicket: c.registerTicket()})
	wantCode(t, "Register when decommissioned", err, codes.PermissionDenied)
	if n := c.storedNode(id); n.State != cpb.NodeState_NODE_STATE_DECOMMISSIONED || n.Status.GetExternalAddress() != "127.0.0.44" {
		t.Fatalf("refused calls changed the record: %v", n)
	}

	if _, err := c.etcd.Delete(ctxT(t), nodeKey(id)); err != nil {
		t.Fatal(err)
	}
	c.waitCachedNode(id, func(n *cpb.Node) bool { return n == nil })
	_, err = node.Heartbeat(ctxT(t), &cpb.HeartbeatRequest{})
	wantCode(t, "Heartbeat when deleted", err, codes.PermissionDenied)
	if IsNodeDecommissioned(err) {
		t.Errorf("Heartbeat when deleted: IsNodeDecommissioned(%v) = true", err)
	}
	_, err = kh.Join(ctxT(t), &cpb.JoinRequest{})
	wantCode(t, "Join when deleted", err, codes.NotFound)
	_, err = kh.CommitRegistration(ctxT(t), &cpb.CommitRegistrationRequest{})
	wantCode(t, "CommitRegistration when deleted", err, codes.NotFound)
}

func TestUpdateNodeStatus(t *testing.T) {
	c := newTestCluster(t)
	key, cert := c.enrolNode(&cpb.NodeStatus{ExternalAddress: "127.0.0.46"})
	id := identity.NodeID(key.Public().(ed25519.PublicKey))
	node := cpb.NewCuratorServiceClient(c.asNode(cert, key))
	first := c.storedNode(c.status.NodeID)

	st := &cpb.NodeStatus{ExternalAddress: "fd00::46", Version: "v1.2.3", BootId: "0e4b2c4a-66b1-4b1a-9b0e-3d5c1f2a7e10", RunningCurator: &cpb.RunningCurator{Port: 7835},
		Kubernetes: &cpb.KubernetesStatus{Running: []string{"apiserver", "controller-manager", "scheduler"}, ApiserverReady: true, ApiserverPort: 6443, WorkerNote: "no kubelet on this kind of node"}}
	if _, err := node.UpdateNodeStatus(ctxT(t), &cpb.UpdateNodeStatusRequest{Status: st}); err != nil {
		t.Fatalf("UpdateNodeStatus: %v", err)
	}
	if got := c.storedNode(id).Status; !proto.Equal(got, st) {
		t.Fatalf("stored status %v, want %v", got, st)
	}
	// Only the caller's record changes: the request cannot even name
	// another node.
	if got := c.storedNode(c.status.NodeID); !proto.Equal(got, first) {
		t.Fatalf("the first node's record changed to %v", got)
	}

	long := make([]byte, maxVersionLen+1)
	for i := range long {
		long[i] = 'v'
	}
	for _, bad := range []*cpb.NodeStatus{
		nil,
		{},
		{ExternalAddress: "127.0.0.1:80"},
		{ExternalAddress: "0.0.0.0"},
		{ExternalAddress: "fe80::1%eth0"},
		{ExternalAddress: "127.0.0.47", Version: string(long)},
		{ExternalAddress: "127.0.0.47", BootId: string(long)},
		{ExternalAddress: "127.0.0.47", RunningCurator: &cpb.RunningCurator{}},
		{ExternalAddress: "127.0.0.47", RunningCurator: &cpb.RunningCurator{Port: 70000}},
		{ExternalAddress: "127.0.0.47", ConsensusPeerPort: 70000},
		{ExternalAddress: "127.0.0.47", Kubernetes: &cpb.KubernetesStatus{Running: []string{"kubelet"}}},
		{ExternalAddress: "127.0.0.47", Kubernetes: &cpb.KubernetesStatus{Running: []string{"apiserver", "apiserver"}}},
		{ExternalAddress: "127.0.0.47", Kubernetes: &cpb.KubernetesStatus{ApiserverPort: 70000}},
		{ExternalAddress: "127.0.0.47", Kubernetes: &cpb.KubernetesStatus{ApiserverReady: true}},
		{ExternalAddress: "127.0.0.47", Kubernetes: &cpb.KubernetesStatus{WorkerNote: strings.Repeat("n", maxKubernetesNoteLen+1)}},
	} {
		_, err := node.UpdateNodeStatus(ctxT(t), &cpb.UpdateNodeStatusRequest{Status: bad})
		wantCode(t, "UpdateNodeStatus("+bad.String()+")", err, codes.InvalidArgument)
		if s, _ := status.FromError(err); s.Message() == "" {
			t.Fatalf("UpdateNodeStatus(%v): no message", bad)
		}
	}
	if got := c.storedNode(id).Status; !proto.Equal(got, st) {
		t.Fatalf("refused updates changed the status to %v", got)
	}
}

// Every CuratorService method refuses every kind of caller its declaration
// does not admit, before its handler sees the request.
func TestCuratorServicePermissions(t *testing.T) {
	c := newTestCluster(t)
	decKey, decCert := c.enrolNode(&cpb.NodeStatus{ExternalAddress: "127.0.0.48"})
	c.forceNodeState(identity.NodeID(decKey.Public().(ed25519.PublicKey)), cpb.NodeState_NODE_STATE_DECOMMISSIONED)

	type caller struct {
		name string
		conn *grpc.ClientConn
		// admitted says whether the caller satisfies a requirement.
		admitted func(cpb.Caller) bool
	}
	callers := []caller{
		{"anonymous", c.anonymous(), func(r cpb.Caller) bool { return r == cpb.Caller_CALLER_UNAUTHENTICATED }},
		{"key holder", c.asKeyHolder(mustKey(t)), func(r cpb.Caller) bool {
			return r == cpb.Caller_CALLER_UNAUTHENTICATED || r == cpb.Caller_CALLER_KEY_HOLDER
		}},
		{"owner", c.asOwner(), func(r cpb.Caller) bool {
			return r == cpb.Caller_CALLER_UNAUTHENTICATED || r == cpb.Caller_CALLER_KEY_HOLDER
		}},
		// Its key gets through to the key-holder handlers, which refuse
		// it by its record, except where the empty request is refused
		// first (Register without a ticket): see TestAuthorizationMatrix
		// for the decommissioned node with real requests.
		{"decommissioned node", c.asNode(decCert, decKey), func(r cpb.Caller) bool {
			return r == cpb.Caller_CALLER_UNAUTHENTICATED
		}},
		{"node", c.asFirstNode(), func(cpb.Caller) bool { return true }},
	}
	methods := cpb.File_polis_curator_v1_curator_proto.Services().ByName("CuratorService").Methods()
	for i := range methods.Len() {
		md := methods.Get(i)
		full := "/" + string(md.Parent().FullName()) + "/" + string(md.Name())
		req, err := cpb.MethodRequirement(full)
		if err != nil {
			t.Fatalf("%s: %v", full, err)
		}
		for _, cl := range callers {
			err := invokeEmpty(ctxT(t), cl.conn, full, md)
			refused := status.Code(err) == codes.PermissionDenied || status.Code(err) == codes.Unauthenticated
			if cl.name == "decommissioned node" && md.Name() == "Register" {
				continue // refused for the missing ticket before its key is looked at
			}
			if refused == cl.admitted(req.Caller) {
				t.Errorf("%s as %s (requirement %v): %v", md.Name(), cl.name, req.Caller, err)
			}
		}
	}
}

// invokeEmpty calls a method with an empty request and returns the error of
// the call (or of the first message of a stream).
func invokeEmpty(ctx context.Context, conn *grpc.ClientConn, method string, md protoreflect.MethodDescriptor) error {
	if err := invokeDynamic(ctx, conn, method, md, dynamicpb.NewMessage(md.Input())); err != nil && err != io.EOF {
		return err
	}
	return nil
}

// invokeDynamic calls a method with req and returns the error of the call,
// or, of a server stream, of receiving its first message (io.EOF for a
// stream that ends without one).
func invokeDynamic(ctx context.Context, conn *grpc.ClientConn, method string, md protoreflect.MethodDescriptor, req *dynamicpb.Message) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resp := dynamicpb.NewMessage(md.Output())
	if !md.IsStreamingServer() {
		return conn.Invoke(ctx, method, req, resp)
	}
	s, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, method)
	if err != nil {
		return err
	}
	if err := s.SendMsg(req); err != nil {
		return err
	}
	if err := s.CloseSend(); err != nil {
		return err
	}
	return s.RecvMsg(resp)
}

// watchStream reads a Watch stream message by message.
type watchStream struct {
	t testing.TB
	s grpc.ServerStreamingClient[cpb.WatchResponse]
}

func (c *testCluster) watch(conn *grpc.ClientConn, req *cpb.WatchRequest) *watchStream {
	c.t.Helper()
	ctx, cancel := context.WithCancel(ctxT(c.t))
	c.t.Cleanup(cancel)
	s, err := cpb.NewCuratorServiceClient(conn).Watch(ctx, req)
	if err != nil {
		c.t.Fatalf("Watch: %v", err)
	}
	return &watchStream{t: c.t, s: s}
}

func (w *watchStream) next() *cpb.WatchResponse {
	w.t.Helper()
	m, err := w.s.Recv()
	if err != nil {
		w.t.Fatalf("Watch: %v", err)
	}
	return m
}

// initial reads the initial state and returns it by node ID.
func (w *watchStream) initial() map[string]*cpb.Node {
	w.t.Helper()
	nodes := map[string]*cpb.Node{}
	for {
		m := w.next()
		if len(m.NodeTombstones) > 0 {
			w.t.Fatalf("tombstones in the initial state: %v", m)
		}
		for _, n := range m.Nodes {
			nodes[n.Id] = n
		}
		if m.InitialStateComplete {
			return nodes
		}
	}
}

func allNodes() *cpb.WatchRequest {
	return &cpb.WatchRequest{Target: &cpb.WatchRequest_AllNodes{AllNodes: &cpb.AllNodes{}}}
}

func TestWatch(t *testing.T) {
	c := newTestCluster(t)
	first := c.watch(c.asFirstNode(), allNodes())
	init := first.initial()
	if len(init) != 1 || init[c.status.NodeID].GetState() != cpb.NodeState_NODE_STATE_UP {
		t.Fatalf("initial state %v, want the first node", init)
	}

	// A node that does not exist yet: an empty initial state, then the
	// node as it appears.
	key := mustKey(t)
	id := identity.NodeID(key.Public().(ed25519.PublicKey))
	one := c.watch(c.asFirstNode(), &cpb.WatchRequest{Target: &cpb.WatchRequest_NodeId{NodeId: id}})
	if m := one.next(); len(m.Nodes) != 0 || len(m.NodeTombstones) != 0 || !m.InitialStateComplete {
		t.Fatalf("initial state of an unknown node: %v", m)
	}

	if _, err := cpb.NewCuratorServiceClient(c.asKeyHolder(key)).Register(ctxT(t), &cpb.RegisterRequest{RegisterTicket: c.registerTicket()}); err != nil {
		t.Fatal(err)
	}
	for _, w := range []*watchStream{first, one} {
		m := w.next()
		if len(m.Nodes) != 1 || m.Nodes[0].Id != id || m.Nodes[0].State != cpb.NodeState_NODE_STATE_NEW || m.InitialStateComplete {
			t.Fatalf("after Register: %v", m)
		}
	}
	// Another node's consensus join data is not for the watcher; the
	// node's own is.
	l, _ := event.Get(ctxT(t), &c.curator.leader)
	if _, err := updateNode(ctxT(t), l.leadership, c.etcd, id, func(n *cpb.Node) (*cpb.Node, error) {
		n.State = cpb.NodeState_NODE_STATE_UP // only UP nodes hold roles
		n.Roles = &cpb.Roles{ConsensusMember: &cpb.ConsensusMemberRole{JoinData: &cpb.ConsensusJoinData{Crl: []byte("crl")}}}
		return n, nil
	}); err != nil {
		t.Fatal(err)
	}
	m := first.next()
	if len(m.Nodes) != 1 || m.Nodes[0].Roles.GetConsensusMember() == nil || m.Nodes[0].Roles.ConsensusMember.JoinData != nil {
		t.Fatalf("another node's record with a role: %v", m)
	}
	one.next() // the same change
	self := c.watch(c.asNode(nodeCertFor(t, c, key), key), &cpb.WatchRequest{Target: &cpb.WatchRequest_NodeId{NodeId: id}})
	if own := self.initial()[id]; own.GetRoles().GetConsensusMember().GetJoinData() == nil {
		t.Fatalf("the node's own record lacks its join data: %v", own)
	}

	// Deletion: a tombstone, for the watchers of all nodes and of this
	// one.
	if _, err := c.etcd.Delete(ctxT(t), nodeKey(id)); err != nil {
		t.Fatal(err)
	}
	for _, w := range []*watchStream{first, one} {
		var m *cpb.WatchResponse
		// Changes may coalesce (the stream sends the newest state), so
		// read past the state changes made above.
		for m = w.next(); len(m.NodeTombstones) == 0; m = w.next() {
		}
		if len(m.NodeTombstones) != 1 || m.NodeTombstones[0].NodeId != id {
			t.Fatalf("after deletion: %v", m)
		}
	}
	// The deleted node's own stream ends: it is no longer a node.
	if _, err := self.s.Recv(); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("the deleted node's stream: %v, want PermissionDenied", err)
	}

	// Malformed requests.
	for _, req := range []*cpb.WatchRequest{{}, {Target: &cpb.WatchRequest_NodeId{NodeId: "node-XYZ"}}} {
		s, err := cpb.NewCuratorServiceClient(c.asFirstNode()).Watch(ctxT(t), req)
		if err == nil {
			_, err = s.Recv()
		}
		wantCode(t, "Watch("+req.String()+")", err, codes.InvalidArgument)
	}
}

func nodeCertFor(t *testing.T, c *testCluster, key ed25519.PrivateKey) *x509.Certificate {
	t.Helper()
	cert, err := c.ca.IssueNode(key.Public().(ed25519.PublicKey), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// A Watch stream is served by any curator (SERVE_ANY), so it outlives a
// change of term: it keeps delivering changes.
func TestWatchOutlivesLeaderChange(t *testing.T) {
	c := newTestCluster(t)
	w := c.watch(c.asFirstNode(), allNodes())
	w.initial()
	term, _ := event.Get(ctxT(t), &c.curator.leader)
	// A new term, as after losing the leadership and winning it back.
	c.curator.leader.Set(&leaderState{leadership: term.leadership, ca: term.ca, statusWrites: map[string]time.Time{}})
	c.curator.leader.Set(nil)
	n := c.seedNode(cpb.NodeState_NODE_STATE_STANDBY).node
	m := w.next()
	if len(m.Nodes) != 1 || m.Nodes[0].Id != n.Id {
		t.Fatalf("after leader changes, the stream sent %v, want node %s", m, n.Id)
	}
}

func TestWatchMessages(t *testing.T) {
	nodes := func(n int) []*cpb.Node {
		var ns []*cpb.Node
		for i := range n {
			ns = append(ns, &cpb.Node{Id: "n" + string(rune('a'+i%26))})
		}
		return ns
	}
	for _, tc := range []struct {
		nodes, tombstones int
		initial           bool
		want              []int // entries per message
	}{
		{0, 0, true, []int{0}},
		{1, 0, true, []int{1}},
		{watchBatchSize, 0, true, []int{watchBatchSize}},
		{watchBatchSize + 1, 0, true, []int{watchBatchSize, 1}},
		{300, 0, true, []int{128, 128, 44}},
		{100, 100, false, []int{128, 72}},
		{0, 3, false, []int{3}},
	} {
		var ids []string
		for range tc.tombstones {
			ids = append(ids, "gone")
		}
		msgs := watchMessages(nodes(tc.nodes), ids, "watcher", tc.initial)
		var got []int
		for i, m := range msgs {
			got = append(got, len(m.Nodes)+len(m.NodeTombstones))
			if m.InitialStateComplete != (tc.initial && i == len(msgs)-1) {
				t.Errorf("%+v: message %d has initial_state_complete %v", tc, i, m.InitialStateComplete)
			}
		}
		if len(got) != len(tc.want) {
			t.Errorf("%+v: messages of %v entries", tc, got)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%+v: messages of %v entries", tc, got)
			}
		}
	}
}

func TestNodeForWatcher(t *testing.T) {
	n := &cpb.Node{Id: "a", Health: cpb.NodeHealth_NODE_HEALTH_HEALTHY,
		Roles: &cpb.Roles{ConsensusMember: &cpb.ConsensusMemberRole{JoinData: &cpb.ConsensusJoinData{Crl: []byte("x")}}}}
	orig := proto.Clone(n)
	other := nodeForWatcher(n, "b")
	if other.Health != cpb.NodeHealth_NODE_HEALTH_UNSPECIFIED || other.Roles.ConsensusMember == nil || other.Roles.ConsensusMember.JoinData != nil {
		t.Errorf("for another node: %v", other)
	}
	self := nodeForWatcher(n, "a")
	if self.Health != cpb.NodeHealth_NODE_HEALTH_UNSPECIFIED || self.Roles.ConsensusMember.JoinData == nil {
		t.Errorf("for itself: %v", self)
	}
	if !proto.Equal(n, orig) {
		t.Errorf("the shared record was modified: %v", n)
	}
	plain := &cpb.Node{Id: "a"}
	if nodeForWatcher(plain, "b") != plain {
		t.Errorf("a record with nothing to strip was copied")
	}
}

// countingWatcher counts the etcd watches opened through it.
type countingWatcher struct {
	clientv3.Watcher
	n atomic.Int32
}

func (w *countingWatcher) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	w.n.Add(1)
	return w.Watcher.Watch(ctx, key, opts...)
}

// fakeWatchStream is the server side of a Watch stream without gRPC: what
// the handler sends arrives on msgs.
type fakeWatchStream struct {
	grpc.ServerStream // nil: the handler uses only Context and Send
	ctx               context.Context
	msgs              chan *cpb.WatchResponse
}

func (f *fakeWatchStream) Context() context.Context { return f.ctx }

func (f *fakeWatchStream) Send(m *cpb.WatchResponse) error {
	select {
	case f.msgs <- m:
		return nil
	case <-f.ctx.Done():
		return f.ctx.Err()
	}
}

// watchBench is a curator cut down to what Watch needs, over an etcd client
// that counts its watches, with handlers called directly (no TLS).
type watchBench struct {
	rpc     *rpcServer
	etcd    *clientv3.Client
	watches *countingWatcher
	term    *leaderState
	node    identity.Identity // the watching node
}

func newWatchBench(t testing.TB) *watchBench {
	t.Helper()
	cli := startConsensus(t)
	cw := &countingWatcher{Watcher: cli.Watcher}
	counted := clientv3.NewCtxClient(context.Background())
	counted.KV, counted.Watcher, counted.Lease = cli.KV, cw, cli.Lease
	t.Cleanup(func() { counted.Close() })
	s := &Service{cfg: Config{Client: counted, HeartbeatInterval: DefaultHeartbeatInterval, Now: time.Now}, nodes: newNodeCache(counted),
		heartbeats: newHeartbeatBook(counted, "node-000000000000000000000000", DefaultHeartbeatInterval, time.Now)}
	term := &leaderState{statusWrites: map[string]time.Time{}}
	s.leader.Set(term)
	supervisortest.Harness(t, s.nodes.run)

	// The watcher is a node like any other: it must be UP to watch.
	key := mustKey(t)
	pub := key.Public().(ed25519.PublicKey)
	b := &watchBench{rpc: &rpcServer{s: s}, etcd: cli, watches: cw, term: term,
		node: identity.Identity{Kind: identity.KindNode, NodeID: identity.NodeID(pub), PublicKey: pub}}
	b.put(t, &cpb.Node{Id: b.node.NodeID, PublicKey: pub, State: cpb.NodeState_NODE_STATE_UP})
	// The cache follows etcd a moment behind, and a Watch from a node it
	// does not hold yet is refused: wait until it holds the watcher. (An
	// empty first listing used to hold the cache back until the first
	// change arrived, which hid this race.)
	if _, err := event.Get(ctxT(t), s.nodes.Snapshots(), event.Filter(func(s *nodeSnapshot) bool { return s.nodes[b.node.NodeID] != nil })); err != nil {
		t.Fatal(err)
	}
	return b
}

func (b *watchBench) put(t testing.TB, n *cpb.Node) {
	t.Helper()
	op, err := putNodeOp(n)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.etcd.Do(ctxT(t), op); err != nil {
		t.Fatal(err)
	}
}

// randomNode is an UP node record with a fresh key and a typical status.
func randomNode(t testing.TB, i int) *cpb.Node {
	pub := mustKey(t).Public().(ed25519.PublicKey)
	ip := netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})
	return &cpb.Node{Id: identity.NodeID(pub), PublicKey: pub, State: cpb.NodeState_NODE_STATE_UP,
		Roles:  &cpb.Roles{KubernetesWorker: &cpb.KubernetesWorkerRole{}},
		Status: &cpb.NodeStatus{ExternalAddress: ip.String(), Version: "v0.4.1-12-g3fa9c1e", BootId: "0e4b2c4a-66b1-4b1a-9b0e-3d5c1f2a7e10"}}
}

// startWatch runs one Watch handler; its messages arrive on the returned
// stream and its error on done.
func (b *watchBench) startWatch(ctx context.Context, req *cpb.WatchRequest) (*fakeWatchStream, <-chan error) {
	ctx = context.WithValue(context.WithValue(ctx, callerKey{}, b.node), leaderKey{}, b.term)
	f := &fakeWatchStream{ctx: ctx, msgs: make(chan *cpb.WatchResponse, 16)}
	done := make(chan error, 1)
	go func() { done <- b.rpc.Watch(req, f) }()
	return f, done
}

// A thousand watching nodes cost one etcd watch: every Watch stream reads
// the node cache.
func TestWatchesShareOneEtcdWatch(t *testing.T) {
	b := newWatchBench(t)
	if _, err := b.rpc.s.nodes.current(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	// The cache lists before it opens its etcd watch: count from when
	// its one watch is open, or that watch would pass for a stream's.
	testutil.Eventually(t, 30*time.Second, "the node cache opening its etcd watch", testutil.Holds(func() bool { return b.watches.n.Load() != 0 }))
	base := b.watches.n.Load()
	ctx, cancel := context.WithCancel(ctxT(t))
	const streams = 50
	var fs []*fakeWatchStream
	var dones []<-chan error
	for range streams {
		f, done := b.startWatch(ctx, allNodes())
		fs, dones = append(fs, f), append(dones, done)
	}
	for _, f := range fs {
		if m := <-f.msgs; !m.InitialStateComplete {
			t.Fatalf("first message %v", m)
		}
	}
	n := randomNode(t, 1)
	b.put(t, n)
	for _, f := range fs {
		if m := <-f.msgs; len(m.Nodes) != 1 || m.Nodes[0].Id != n.Id {
			t.Fatalf("change %v", m)
		}
	}
	if got := b.watches.n.Load(); got != base {
		t.Errorf("%d Watch streams opened %d etcd watches", streams, got-base)
	}
	if got := b.rpc.s.nodes.value.Info().Watchers; got < streams {
		t.Errorf("the node cache has %d watchers for %d streams", got, streams)
	}
	cancel()
	for _, done := range dones {
		if err := <-done; status.Code(err) != codes.Canceled {
			t.Errorf("a cancelled Watch returned %v", err)
		}
	}
	if got := b.rpc.s.nodes.value.Info().Watchers; got != 0 {
		t.Errorf("%d node cache watchers left after every stream ended", got)
	}
}
