package node

import (
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	nodev1 "github.com/polis-os/polis/api/node/v1"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/roleserve"
	"github.com/polis-os/polis/supervisor/supervisortest"
)

// A node renews its certificate when it is due, as itself, stores it and
// publishes the new credentials.
func TestCertificateRenewal(t *testing.T) {
	n := bootstrapNode(t, netip.AddrFrom4([4]byte{127, 27, 251, 1}))
	// The first certificate is due at once; the renewed one is not.
	var due dueOnce
	n.renewAt = due.renewAt
	supervisortest.Harness(t, n.Run)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	first, err := event.Get(ctx, &n.Values().Credentials, event.Filter(func(c *roleserve.Credentials) bool { return c != nil }))
	if err != nil {
		t.Fatal(err)
	}
	renewed, err := event.Get(ctx, &n.Values().Credentials, event.Filter(func(c *roleserve.Credentials) bool {
		return c != nil && c.Certificate.SerialNumber.Cmp(first.Certificate.SerialNumber) != 0
	}))
	if err != nil {
		t.Fatalf("the certificate was not renewed: %v", err)
	}
	if renewed.NodeID != first.NodeID {
		t.Fatalf("renewed for %s, want %s", renewed.NodeID, first.NodeID)
	}
	stored, err := n.root.Data.Node.Certificate.Read()
	if err != nil {
		t.Fatal(err)
	}
	if !renewed.Certificate.Equal(mustParse(t, stored)) {
		t.Fatal("the renewed certificate was not stored")
	}
}

func mustParse(t *testing.T, der []byte) *x509.Certificate {
	t.Helper()
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// dueOnce is a renewal schedule (a Node's renewAt or apiRenewAt) under
// which the first certificate asked about is due at once and every other
// one when identity.RenewAt says. Which one is first is told by its
// serial, not by when the test reads the credentials: the renewal loop may
// ask after the test has seen them.
type dueOnce struct{ first atomic.Pointer[big.Int] }

func (d *dueOnce) renewAt(c *x509.Certificate) time.Time {
	d.first.CompareAndSwap(nil, c.SerialNumber)
	if c.SerialNumber.Cmp(d.first.Load()) == 0 {
		return time.Now()
	}
	return identity.RenewAt(c)
}

// renewed says whether c is a certificate other than the first.
func (d *dueOnce) renewed(c *x509.Certificate) bool {
	first := d.first.Load()
	return c != nil && first != nil && c.SerialNumber.Cmp(first) != 0
}

// bootstrapNode is a node, not yet running, that bootstraps a new cluster
// at addr, its storage in a directory of the test's.
func bootstrapNode(t *testing.T, addr netip.Addr) *Node {
	t.Helper()
	dir := t.TempDir()
	n, err := New(Config{StorageRoot: filepath.Join(dir, "storage"), Address: addr, ParametersFile: bootstrapParameters(t, dir)})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// bootstrapParameters writes, in dir, the parameters of a node that
// bootstraps a new cluster for a fresh owner key, and returns their path.
func bootstrapParameters(t *testing.T, dir string) string {
	t.Helper()
	owner, err := identity.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	params, err := proto.Marshal(&nodev1.NodeParameters{Cluster: &nodev1.NodeParameters_ClusterBootstrap{
		ClusterBootstrap: &nodev1.ClusterBootstrap{OwnerPublicKey: owner.Public().(ed25519.PublicKey)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "parameters.pb")
	if err := os.WriteFile(path, params, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
