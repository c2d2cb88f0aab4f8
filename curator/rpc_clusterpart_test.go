package curator

import (
	"bytes"
	"crypto/ed25519"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/identity"
)

func getClusterPart(t *testing.T, conn *grpc.ClientConn) ([]byte, error) {
	t.Helper()
	resp, err := cpb.NewCuratorServiceClient(conn).GetClusterPart(ctxT(t), &cpb.GetClusterPartRequest{})
	return resp.GetClusterPart(), err
}

// TestGetClusterPart: over real mTLS to a curator on real etcd, an UP
// node gets its own cluster part, the same one every time, whether it
// proves its key with its node certificate or with a self-signed one;
// another node gets another; no node record ever holds one; the owner,
// a key of no node, a NEW node and an anonymous caller get none; a
// decommissioned node and a deleted one are refused with reasons they
// can tell apart, and deleting the node deletes its part.
func TestGetClusterPart(t *testing.T) {
	c := newTestCluster(t)
	keyA, certA := c.enrolNode(&cpb.NodeStatus{ExternalAddress: "10.0.0.2"})
	keyB, certB := c.enrolNode(&cpb.NodeStatus{ExternalAddress: "10.0.0.3"})
	idA := identity.NodeID(keyA.Public().(ed25519.PublicKey))

	partA, err := getClusterPart(t, c.asKeyHolder(keyA))
	if err != nil {
		t.Fatalf("GetClusterPart by node A (its key): %v", err)
	}
	if len(partA) != clusterPartSize || bytes.Equal(partA, make([]byte, clusterPartSize)) {
		t.Fatalf("node A's cluster part: %x", partA)
	}
	again, err := getClusterPart(t, c.asNode(certA, keyA))
	if err != nil || !bytes.Equal(again, partA) {
		t.Fatalf("GetClusterPart by node A again, with its node certificate: %x, %v; want the same part %x", again, err, partA)
	}
	partB, err := getClusterPart(t, c.asNode(certB, keyB))
	if err != nil {
		t.Fatalf("GetClusterPart by node B: %v", err)
	}
	if bytes.Equal(partA, partB) {
		t.Fatal("nodes A and B got the same cluster part")
	}
	// The part lives beside the record, never in it: every node may
	// Watch every record.
	for _, id := range []string{idA, identity.NodeID(keyB.Public().(ed25519.PublicKey))} {
		rec, err := proto.Marshal(c.storedNode(id))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(rec, partA) || bytes.Contains(rec, partB) {
			t.Errorf("node %s's record holds a cluster part", id)
		}
	}

	_, err = getClusterPart(t, c.asOwner())
	wantStatus(t, "GetClusterPart by the owner", err, codes.NotFound, "not part of the cluster")
	_, err = getClusterPart(t, c.asKeyHolder(mustKey(t)))
	wantStatus(t, "GetClusterPart by a key of no node", err, codes.NotFound, "not part of the cluster")
	if !IsNodeNotFound(err) || IsNodeDecommissioned(err) {
		t.Errorf("the refusal of a key of no node: IsNodeNotFound %v, IsNodeDecommissioned %v", IsNodeNotFound(err), IsNodeDecommissioned(err))
	}
	_, err = getClusterPart(t, c.anonymous())
	wantStatus(t, "GetClusterPart without a client certificate", err, codes.Unauthenticated, "")
	newKey := mustKey(t)
	if _, err := cpb.NewCuratorServiceClient(c.asKeyHolder(newKey)).Register(ctxT(t), &cpb.RegisterRequest{RegisterTicket: c.registerTicket()}); err != nil {
		t.Fatal(err)
	}
	_, err = getClusterPart(t, c.asKeyHolder(newKey))
	wantStatus(t, "GetClusterPart by a NEW node", err, codes.FailedPrecondition, "NEW")

	mgmt := c.management()
	if _, err := mgmt.DecommissionNode(ctxT(t), &cpb.DecommissionNodeRequest{NodeId: idA}); err != nil {
		t.Fatal(err)
	}
	_, err = getClusterPart(t, c.asKeyHolder(keyA))
	wantStatus(t, "GetClusterPart by a decommissioned node", err, codes.PermissionDenied, "decommissioned")
	if !IsNodeDecommissioned(err) {
		t.Errorf("the refusal of a decommissioned node is not marked as such: %v", err)
	}
	if got, err := c.etcd.Get(ctxT(t), clusterPartKey(idA)); err != nil || got.Count != 1 {
		t.Fatalf("node A's part before its deletion: %v, %v", got, err)
	}
	if _, err := mgmt.DeleteNode(ctxT(t), &cpb.DeleteNodeRequest{NodeId: idA}); err != nil {
		t.Fatal(err)
	}
	_, err = getClusterPart(t, c.asKeyHolder(keyA))
	wantStatus(t, "GetClusterPart by a decommissioned, then deleted node", err, codes.PermissionDenied, "decommissioned")
	if !IsNodeDecommissioned(err) {
		t.Errorf("the refusal of a deleted node is not marked: %v", err)
	}
	if got, err := c.etcd.Get(ctxT(t), clusterPartKey(idA)); err != nil || got.Count != 0 {
		t.Errorf("node A's part after its deletion: %v, %v; want it deleted with the record", got, err)
	}
	// B is untouched by A's fate.
	if got, err := getClusterPart(t, c.asKeyHolder(keyB)); err != nil || !bytes.Equal(got, partB) {
		t.Errorf("node B's part after A's deletion: %x, %v", got, err)
	}
}

// TestGetClusterPartConcurrentFirstCalls: the first calls of one node,
// made at once, all get one part (the transaction makes it once).
func TestGetClusterPartConcurrentFirstCalls(t *testing.T) {
	c := newTestCluster(t)
	key, _ := c.enrolNode(&cpb.NodeStatus{ExternalAddress: "10.0.0.2"})
	conn := c.asKeyHolder(key)
	const n = 8
	parts := make(chan []byte, n)
	errs := make(chan error, n)
	for range n {
		go func() {
			resp, err := cpb.NewCuratorServiceClient(conn).GetClusterPart(ctxT(t), &cpb.GetClusterPartRequest{})
			parts <- resp.GetClusterPart()
			errs <- err
		}()
	}
	var first []byte
	for range n {
		p, err := <-parts, <-errs
		if err != nil {
			t.Fatal(err)
		}
		if first == nil {
			first = p
		}
		if !bytes.Equal(p, first) {
			t.Fatalf("concurrent first calls got two parts: %x and %x", first, p)
		}
	}
}
