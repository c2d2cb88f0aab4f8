package curator

import (
	"crypto/ed25519"
	"errors"
	"testing"
	"time"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/identity"
)

func TestBootstrapIsIdempotentAndRefusesAnotherCluster(t *testing.T) {
	cli := startConsensus(t)
	owner, node := mustKey(t), mustKey(t)
	params := BootstrapParams{
		OwnerKey:   owner.Public().(ed25519.PublicKey),
		NodeKey:    node.Public().(ed25519.PublicKey),
		NodeStatus: &cpb.NodeStatus{ExternalAddress: "127.0.0.1"},
	}
	cert, err := Bootstrap(ctxT(t), cli, params, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if cert.Subject.CommonName != identity.NodeID(params.NodeKey) {
		t.Fatalf("certificate for %q", cert.Subject.CommonName)
	}
	n, _, err := getNode(ctxT(t), cli, identity.NodeID(params.NodeKey))
	if err != nil || n.State != cpb.NodeState_NODE_STATE_UP || n.Roles.GetConsensusMember() == nil || n.Roles.GetKubernetesController() != nil || n.Roles.GetKubernetesWorker() != nil {
		t.Fatalf("first node = %v, %v", n, err)
	}

	// Again, even after the first node's record changed: fine.
	n.Roles.KubernetesWorker = &cpb.KubernetesWorkerRole{}
	op, err := putNodeOp(n)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Do(ctxT(t), op); err != nil {
		t.Fatal(err)
	}
	if _, err := Bootstrap(ctxT(t), cli, params, time.Now()); err != nil {
		t.Fatalf("second bootstrap: %v", err)
	}

	// Another owner or another first node: refused, nothing changed.
	other := params
	other.OwnerKey = mustKey(t).Public().(ed25519.PublicKey)
	if _, err := Bootstrap(ctxT(t), cli, other, time.Now()); !errors.Is(err, ErrBootstrapMismatch) {
		t.Fatalf("bootstrap with another owner: %v", err)
	}
	other = params
	other.NodeKey = mustKey(t).Public().(ed25519.PublicKey)
	if _, err := Bootstrap(ctxT(t), cli, other, time.Now()); !errors.Is(err, ErrBootstrapMismatch) {
		t.Fatalf("bootstrap with another node: %v", err)
	}
	if n, _, _ := getNode(ctxT(t), cli, identity.NodeID(other.NodeKey)); n != nil {
		t.Fatalf("a refused bootstrap wrote node %s", n.Id)
	}

	// Bad parameters.
	bad := params
	bad.NodeStatus = &cpb.NodeStatus{ExternalAddress: "not an address"}
	if _, err := Bootstrap(ctxT(t), cli, bad, time.Now()); err == nil {
		t.Fatal("bootstrap with a bad address succeeded")
	}
}
