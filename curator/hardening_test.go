package curator

import (
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/supervisor/supervisortest"
)

// withUnknownField gives m a field its message type does not define,
// carrying size bytes: what a newer or hostile client can send, and what
// proto.Unmarshal keeps and proto.Marshal writes out again.
func withUnknownField[M proto.Message](m M, size int) M {
	b := protowire.AppendTag(nil, 999, protowire.BytesType)
	b = protowire.AppendBytes(b, make([]byte, size))
	m.ProtoReflect().SetUnknown(b)
	return m
}

// TestStatusBoundedInput: a status is refused, and nothing stored, when it
// carries unknown fields (at any depth) or is too large, in Register and in
// UpdateNodeStatus; a request over the curator's message limit is refused
// before it is decoded.
func TestStatusBoundedInput(t *testing.T) {
	c := newTestCluster(t)
	key, cert := c.enrolNode(&cpb.NodeStatus{ExternalAddress: "127.0.0.50"})
	before := c.storeState()
	kh := cpb.NewCuratorServiceClient(c.asKeyHolder(mustKey(t)))
	node := cpb.NewCuratorServiceClient(c.asNode(cert, key))

	nested := &cpb.NodeStatus{ExternalAddress: "127.0.0.51", RunningCurator: withUnknownField(&cpb.RunningCurator{Port: 1}, 8)}
	for _, tc := range []struct {
		name string
		st   *cpb.NodeStatus
		want codes.Code
	}{
		{"a 1 MB status", withUnknownField(&cpb.NodeStatus{ExternalAddress: "127.0.0.51"}, 1<<20), codes.ResourceExhausted},
		{"a small unknown field", withUnknownField(&cpb.NodeStatus{ExternalAddress: "127.0.0.51"}, 8), codes.InvalidArgument},
		{"an unknown field in a nested message", nested, codes.InvalidArgument},
		{"a status over 1 KiB", withUnknownField(&cpb.NodeStatus{ExternalAddress: "127.0.0.51"}, 2000), codes.InvalidArgument},
	} {
		_, err := kh.Register(ctxT(t), &cpb.RegisterRequest{RegisterTicket: c.registerTicket(), Status: tc.st})
		wantCode(t, "Register with "+tc.name, err, tc.want)
		_, err = node.UpdateNodeStatus(ctxT(t), &cpb.UpdateNodeStatusRequest{Status: tc.st})
		wantCode(t, "UpdateNodeStatus with "+tc.name, err, tc.want)
	}
	c.wantStoreUnchanged(t, before, "refused statuses")
	// The error names what is wrong.
	_, err := kh.Register(ctxT(t), &cpb.RegisterRequest{RegisterTicket: c.registerTicket(), Status: nested})
	if msg := status.Convert(err).Message(); !strings.Contains(msg, "running_curator") || !strings.Contains(msg, "does not know") {
		t.Errorf("refusal %q does not name the field", msg)
	}
}

// TestNewNodeLimit: NEW records are limited in all; keys already NEW may
// retry; approving or deleting frees room. Watch and ListNodes keep
// working whatever was tried.
func TestNewNodeLimit(t *testing.T) {
	const limit = 5
	c := newTestCluster(t, func(cfg *Config) { cfg.MaxNewNodes = limit })
	ticket := c.registerTicket()
	var keys []ed25519.PrivateKey
	for i := range limit {
		key := mustKey(t)
		st := &cpb.NodeStatus{ExternalAddress: "127.0.1.1", Version: string(make([]byte, maxVersionLen))}
		if _, err := cpb.NewCuratorServiceClient(c.asKeyHolder(key)).Register(ctxT(t), &cpb.RegisterRequest{RegisterTicket: ticket, Status: st}); err != nil {
			t.Fatalf("Register %d: %v", i, err)
		}
		keys = append(keys, key)
	}
	// Bloat attempts on the way, each refused.
	for range 5 {
		big := withUnknownField(&cpb.NodeStatus{ExternalAddress: "127.0.1.1"}, 1<<20)
		_, err := cpb.NewCuratorServiceClient(c.asKeyHolder(mustKey(t))).Register(ctxT(t), &cpb.RegisterRequest{RegisterTicket: ticket, Status: big})
		wantCode(t, "a 1 MB Register", err, codes.ResourceExhausted)
	}
	extra := mustKey(t)
	_, err := cpb.NewCuratorServiceClient(c.asKeyHolder(extra)).Register(ctxT(t), &cpb.RegisterRequest{RegisterTicket: ticket})
	wantCode(t, "Register beyond the limit", err, codes.ResourceExhausted)
	if _, err := cpb.NewCuratorServiceClient(c.asKeyHolder(keys[0])).Register(ctxT(t), &cpb.RegisterRequest{RegisterTicket: ticket}); err != nil {
		t.Errorf("a NEW node's retry at the limit: %v", err)
	}

	// The cluster is still readable by nodes and the owner.
	w := c.watch(c.asFirstNode(), allNodes())
	if got := len(w.initial()); got != limit+1 {
		t.Errorf("Watch(all) saw %d nodes, want %d", got, limit+1)
	}
	all, _ := listNodes(t, c.management(), &cpb.ListNodesRequest{})
	if len(all) != limit+1 {
		t.Errorf("ListNodes listed %d nodes, want %d", len(all), limit+1)
	}

	// Approving one makes room.
	if _, err := c.management().ApproveNode(ctxT(t), &cpb.ApproveNodeRequest{NodeId: identity.NodeID(keys[1].Public().(ed25519.PublicKey))}); err != nil {
		t.Fatal(err)
	}
	c.waitCachedNode(identity.NodeID(keys[1].Public().(ed25519.PublicKey)), func(n *cpb.Node) bool { return n.GetState() == cpb.NodeState_NODE_STATE_STANDBY })
	if _, err := cpb.NewCuratorServiceClient(c.asKeyHolder(extra)).Register(ctxT(t), &cpb.RegisterRequest{RegisterTicket: ticket}); err != nil {
		t.Errorf("Register after an approval made room: %v", err)
	}
}

// TestRegisterRetriesRewriteStatusRarely: a key's Register retries replace
// its stored status at most once per RegisterStatusInterval.
func TestRegisterRetriesRewriteStatusRarely(t *testing.T) {
	// A clock that moves only when the test says, so that the retries
	// below fall within one interval however slow the machine is.
	var offset atomic.Int64
	base := time.Now()
	c := newTestCluster(t, func(cfg *Config) {
		cfg.Now = func() time.Time { return base.Add(time.Duration(offset.Load())) }
	})
	key := mustKey(t)
	id := identity.NodeID(key.Public().(ed25519.PublicKey))
	kh := cpb.NewCuratorServiceClient(c.asKeyHolder(key))
	register := func(addr string) {
		t.Helper()
		if _, err := kh.Register(ctxT(t), &cpb.RegisterRequest{RegisterTicket: c.registerTicket(), Status: &cpb.NodeStatus{ExternalAddress: addr}}); err != nil {
			t.Fatalf("Register: %v", err)
		}
	}
	register("127.0.2.1")
	rev := func() int64 {
		resp, err := c.etcd.Get(ctxT(t), nodeKey(id))
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("reading the record: %v", err)
		}
		return resp.Kvs[0].ModRevision
	}
	first := rev()
	for i := range 20 {
		register(netip.AddrFrom4([4]byte{127, 0, 2, byte(2 + i)}).String())
	}
	if rev() != first || c.storedNode(id).Status.ExternalAddress != "127.0.2.1" {
		t.Fatalf("20 quick retries rewrote the record (revision %d → %d, address %s)", first, rev(), c.storedNode(id).Status.ExternalAddress)
	}
	offset.Store(int64(RegisterStatusInterval + time.Second))
	register("127.0.2.99")
	if got := c.storedNode(id).Status.ExternalAddress; got != "127.0.2.99" {
		t.Errorf("a retry after the interval stored %s, want 127.0.2.99", got)
	}
}

// TestDeletedDecommissionedKeyIsRetired: after DecommissionNode and
// DeleteNode, the key cannot register again with the ticket, nor commit
// nor join; a deleted NEW node may register again.
func TestDeletedDecommissionedKeyIsRetired(t *testing.T) {
	c := newTestCluster(t)
	m := c.management()
	key, _ := c.enrolNode(&cpb.NodeStatus{ExternalAddress: "127.0.0.60"})
	id := identity.NodeID(key.Public().(ed25519.PublicKey))
	if _, err := m.DecommissionNode(ctxT(t), &cpb.DecommissionNodeRequest{NodeId: id}); err != nil {
		t.Fatalf("DecommissionNode: %v", err)
	}
	if _, err := m.DeleteNode(ctxT(t), &cpb.DeleteNodeRequest{NodeId: id}); err != nil {
		t.Fatalf("DeleteNode: %v", err)
	}
	kh := cpb.NewCuratorServiceClient(c.asKeyHolder(key))
	_, err := kh.Register(ctxT(t), &cpb.RegisterRequest{RegisterTicket: c.registerTicket()})
	wantCode(t, "Register with a retired key", err, codes.PermissionDenied)
	_, err = kh.CommitRegistration(ctxT(t), &cpb.CommitRegistrationRequest{})
	wantCode(t, "CommitRegistration with a retired key", err, codes.PermissionDenied)
	_, err = kh.Join(ctxT(t), &cpb.JoinRequest{})
	wantCode(t, "Join with a retired key", err, codes.PermissionDenied)
	if n := c.storedNode(id); n != nil {
		t.Fatalf("a retired key has a record again: %v", n)
	}

	// A NEW node that is deleted never had credentials: it may register
	// again, and needs approval again.
	fresh := mustKey(t)
	fkh := cpb.NewCuratorServiceClient(c.asKeyHolder(fresh))
	reg, err := fkh.Register(ctxT(t), &cpb.RegisterRequest{RegisterTicket: c.registerTicket()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.DeleteNode(ctxT(t), &cpb.DeleteNodeRequest{NodeId: reg.NodeId}); err != nil {
		t.Fatal(err)
	}
	if _, err := fkh.Register(ctxT(t), &cpb.RegisterRequest{RegisterTicket: c.registerTicket()}); err != nil {
		t.Errorf("Register again after a NEW node was deleted: %v", err)
	}
}

// TestRotateRegisterTicket: the owner replaces the ticket; the old one
// registers nobody, the new one does.
func TestRotateRegisterTicket(t *testing.T) {
	c := newTestCluster(t)
	old := c.registerTicket()
	resp, err := c.management().RotateRegisterTicket(ctxT(t), &cpb.RotateRegisterTicketRequest{})
	if err != nil {
		t.Fatalf("RotateRegisterTicket: %v", err)
	}
	if len(resp.RegisterTicket) != 32 || string(resp.RegisterTicket) == string(old) || string(resp.RegisterTicket) != string(c.registerTicket()) {
		t.Fatalf("new ticket %x (old %x, stored %x)", resp.RegisterTicket, old, c.registerTicket())
	}
	if string(resp.ClusterDirectory.GetCaCertificate()) != string(c.ca.Certificate().Raw) {
		t.Error("the response's directory lacks the CA")
	}
	kh := cpb.NewCuratorServiceClient(c.asKeyHolder(mustKey(t)))
	_, err = kh.Register(ctxT(t), &cpb.RegisterRequest{RegisterTicket: old})
	wantCode(t, "Register with the old ticket", err, codes.PermissionDenied)
	if _, err := kh.Register(ctxT(t), &cpb.RegisterRequest{RegisterTicket: resp.RegisterTicket}); err != nil {
		t.Errorf("Register with the new ticket: %v", err)
	}
	got, err := c.management().GetRegisterTicket(ctxT(t), &cpb.GetRegisterTicketRequest{})
	if err != nil || string(got.RegisterTicket) != string(resp.RegisterTicket) {
		t.Errorf("GetRegisterTicket after rotation: %x, %v", got.GetRegisterTicket(), err)
	}
}

// TestRotateOwnerKey: the owner replaces its key, proving the new one; every
// certificate of the old key is refused from then on, and the old key no
// longer takes ownership.
func TestRotateOwnerKey(t *testing.T) {
	c := newTestCluster(t)
	oldConn := c.asOwner()
	aaa := cpb.NewAAAServiceClient(oldConn)
	newKey := mustKey(t)
	newPub := newKey.Public().(ed25519.PublicKey)
	oldPub := c.ownerKey.Public().(ed25519.PublicKey)
	msg := cpb.OwnerKeyRotationMessage(c.ca.Certificate().Raw, oldPub)

	for _, tc := range []struct {
		name string
		req  *cpb.RotateOwnerKeyRequest
	}{
		{"no key", &cpb.RotateOwnerKeyRequest{}},
		{"no signature", &cpb.RotateOwnerKeyRequest{NewOwnerKey: newPub}},
		{"a signature by the old key", &cpb.RotateOwnerKeyRequest{NewOwnerKey: newPub, NewOwnerKeySignature: ed25519.Sign(c.ownerKey, msg)}},
		{"a signature for another cluster", &cpb.RotateOwnerKeyRequest{NewOwnerKey: newPub, NewOwnerKeySignature: ed25519.Sign(newKey, cpb.OwnerKeyRotationMessage([]byte("other CA"), oldPub))}},
		{"the current key", &cpb.RotateOwnerKeyRequest{NewOwnerKey: oldPub, NewOwnerKeySignature: ed25519.Sign(c.ownerKey, msg)}},
	} {
		_, err := aaa.RotateOwnerKey(ctxT(t), tc.req)
		wantCode(t, "RotateOwnerKey with "+tc.name, err, codes.InvalidArgument)
	}
	resp, err := aaa.RotateOwnerKey(ctxT(t), &cpb.RotateOwnerKeyRequest{NewOwnerKey: newPub, NewOwnerKeySignature: ed25519.Sign(newKey, msg)})
	if err != nil {
		t.Fatalf("RotateOwnerKey: %v", err)
	}
	cert := mustParseCert(t, resp.OwnerCertificate)
	if pub, ok := cert.PublicKey.(ed25519.PublicKey); !ok || !pub.Equal(newPub) || cert.Subject.CommonName != OwnerUserName {
		t.Fatalf("the new owner certificate: %s for %x", cert.Subject, cert.PublicKey)
	}

	// The old key's certificates are revoked, on a connection made before
	// the rotation and on a new one.
	for _, conn := range []*cpb.ManagementServiceClient{ptr(cpb.NewManagementServiceClient(oldConn)), ptr(c.management())} {
		_, err := (*conn).GetClusterInfo(ctxT(t), &cpb.GetClusterInfoRequest{})
		wantCode(t, "GetClusterInfo with an old owner certificate", err, codes.PermissionDenied)
	}
	_, err = cpb.NewAAAServiceClient(c.asKeyHolder(c.ownerKey)).TakeOwnership(ctxT(t), &cpb.TakeOwnershipRequest{})
	wantCode(t, "TakeOwnership with the old key", err, codes.PermissionDenied)
	if _, err := cpb.NewManagementServiceClient(c.asUserCert(cert, newKey)).GetClusterInfo(ctxT(t), &cpb.GetClusterInfoRequest{}); err != nil {
		t.Errorf("GetClusterInfo with the new owner certificate: %v", err)
	}
	if _, err := cpb.NewAAAServiceClient(c.asKeyHolder(newKey)).TakeOwnership(ctxT(t), &cpb.TakeOwnershipRequest{}); err != nil {
		t.Errorf("TakeOwnership with the new key: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }

// TestCuratorServesWithCuratorCertificate: the curator presents a
// short-lived curator certificate for its own node and serving address,
// and issues one only to a node whose record holds ConsensusMember.
func TestCuratorServesWithCuratorCertificate(t *testing.T) {
	c := newTestCluster(t)
	pool := x509.NewCertPool()
	pool.AddCert(c.ca.Certificate())
	conn, err := tls.Dial("tcp", c.status.Address.String(), &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13, ServerName: c.status.NodeID})
	if err != nil {
		t.Fatalf("dialling the curator by its node ID: %v", err)
	}
	leaf := conn.ConnectionState().PeerCertificates[0]
	conn.Close()
	if !slices.Equal(leaf.Subject.OrganizationalUnit, []string{"polis-curator"}) || leaf.Subject.CommonName != c.status.NodeID {
		t.Errorf("the curator serves with %s, want a curator certificate for %s", leaf.Subject, c.status.NodeID)
	}
	if life := leaf.NotAfter.Sub(leaf.NotBefore); life > identity.CuratorCertificateLifetime+identity.ClockSkew {
		t.Errorf("the curator certificate is valid for %s, want at most %s", life, identity.CuratorCertificateLifetime+identity.ClockSkew)
	}
	if len(leaf.IPAddresses) != 1 || leaf.IPAddresses[0].String() != c.status.Address.Addr().String() {
		t.Errorf("the curator certificate names %v, want only the serving address %s", leaf.IPAddresses, c.status.Address.Addr())
	}

	// Only a node the cluster made a consensus member gets one.
	addr := netip.MustParseAddr("127.0.0.70")
	for _, tc := range []struct {
		name  string
		state cpb.NodeState
		roles *cpb.Roles
	}{
		{"an UP node without ConsensusMember", cpb.NodeState_NODE_STATE_UP, &cpb.Roles{KubernetesWorker: &cpb.KubernetesWorkerRole{}}},
		{"a STANDBY node", cpb.NodeState_NODE_STATE_STANDBY, nil},
		{"a DECOMMISSIONED node", cpb.NodeState_NODE_STATE_DECOMMISSIONED, nil},
	} {
		n := c.seedNode(tc.state)
		n.node.Roles = tc.roles
		c.putNode(n.node)
		s := &Service{cfg: Config{Client: c.etcd, NodeKey: n.key, Now: time.Now}, nodeID: n.node.Id}
		if _, err := s.curatorCertificate(ctxT(t), c.ca, addr); err == nil {
			t.Errorf("%s got a curator certificate", tc.name)
		}
	}
	unknown := mustKey(t)
	s := &Service{cfg: Config{Client: c.etcd, NodeKey: unknown, Now: time.Now}, nodeID: identity.NodeID(unknown.Public().(ed25519.PublicKey))}
	if _, err := s.curatorCertificate(ctxT(t), c.ca, addr); err == nil {
		t.Error("a node without a record got a curator certificate")
	}
	member := c.seedNode(cpb.NodeState_NODE_STATE_UP)
	member.node.Roles = &cpb.Roles{ConsensusMember: &cpb.ConsensusMemberRole{}}
	c.putNode(member.node)
	s = &Service{cfg: Config{Client: c.etcd, NodeKey: member.key, Now: time.Now}, nodeID: member.node.Id}
	tc, err := s.curatorCertificate(ctxT(t), c.ca, addr)
	if err != nil {
		t.Fatalf("a consensus member's curator certificate: %v", err)
	}
	if _, err := identity.NewServingCertificate(c.ca.Verifier(), tc); err != nil {
		t.Errorf("the consensus member's curator certificate does not serve: %v", err)
	}
}

// TestStoredRecordsChecked: a record that fails the checks is neither
// written nor, when something else wrote it, served.
func TestStoredRecordsChecked(t *testing.T) {
	c := newTestCluster(t)
	n := c.seedNode(cpb.NodeState_NODE_STATE_NEW).node
	bad := withUnknownField(proto.Clone(n).(*cpb.Node), 16)
	if _, err := putNodeOp(bad); !errors.Is(err, errInvalidRecord) {
		t.Errorf("putNodeOp with an unknown field: %v, want errInvalidRecord", err)
	}
	// Written behind the curator's back: the cache leaves it out, so the
	// node is refused everywhere instead of served.
	b, err := proto.Marshal(bad)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.etcd.Put(ctxT(t), nodeKey(n.Id), string(b)); err != nil {
		t.Fatal(err)
	}
	c.waitCachedNode(n.Id, func(n *cpb.Node) bool { return n == nil })
}

// TestCuratorRenewsItsCertificate: a running curator replaces its curator
// certificate when it is due, as long as its node holds ConsensusMember.
func TestCuratorRenewsItsCertificate(t *testing.T) {
	c := newTestCluster(t)
	member := c.seedNode(cpb.NodeState_NODE_STATE_UP)
	member.node.Roles = &cpb.Roles{ConsensusMember: &cpb.ConsensusMemberRole{}}
	c.putNode(member.node)
	s, err := New(Config{Client: c.etcd, Consensus: c.consensus.Status(), NodeKey: member.key, ListenAddress: netip.AddrPortFrom(netip.MustParseAddr(member.node.Status.ExternalAddress), 0).String()})
	if err != nil {
		t.Fatal(err)
	}
	// Due at once, every time: each renewal is observable.
	s.renewAt = func(*x509.Certificate) time.Time { return time.Now() }
	supervisortest.Harness(t, s.Run)
	st, err := event.Get(ctxT(t), s.Status())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(c.ca.Certificate())
	served := func() *x509.Certificate {
		t.Helper()
		conn, err := tls.Dial("tcp", st.Address.String(), &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13, ServerName: member.node.Id})
		if err != nil {
			t.Fatalf("dialling the curator: %v", err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0]
	}
	first := served()
	testutil.Eventually(t, waitTimeout, "the curator renewing its certificate", func() error {
		if serial := served().SerialNumber; serial.Cmp(first.SerialNumber) == 0 {
			return fmt.Errorf("still serving the certificate of serial %v", serial)
		}
		return nil
	})
}
