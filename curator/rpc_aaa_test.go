package curator

import (
	"crypto/ed25519"
	"crypto/x509"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cpb "github.com/polis-os/polis/api/curator/v1"
)

func TestTakeOwnership(t *testing.T) {
	c := newTestCluster(t)
	before := c.storeState()

	resp, err := cpb.NewAAAServiceClient(c.asKeyHolder(c.ownerKey)).TakeOwnership(ctxT(t), &cpb.TakeOwnershipRequest{})
	if err != nil {
		t.Fatalf("TakeOwnership with the owner key: %v", err)
	}
	cert, err := x509.ParseCertificate(resp.OwnerCertificate)
	if err != nil {
		t.Fatalf("owner certificate: %v", err)
	}
	if cert.Subject.CommonName != OwnerUserName {
		t.Errorf("owner certificate names %q, want %q", cert.Subject.CommonName, OwnerUserName)
	}
	if pub, ok := cert.PublicKey.(ed25519.PublicKey); !ok || !pub.Equal(c.ownerKey.Public()) {
		t.Errorf("owner certificate is not for the owner key")
	}
	if !c.ca.Certificate().Equal(mustParseCert(t, resp.ClusterDirectory.GetCaCertificate())) {
		t.Errorf("the directory's CA is not the cluster CA")
	}
	if got, err := c.ca.Verifier().Identify([]*x509.Certificate{cert}, time.Now()); err != nil || got.UserName != OwnerUserName {
		t.Fatalf("the cluster identifies the owner certificate as %v, %v", got, err)
	}
	// Issuing a certificate writes nothing.
	c.wantStoreUnchanged(t, before, "TakeOwnership")

	// The certificate is what the owner manages the cluster with.
	info, err := cpb.NewManagementServiceClient(c.asUserCert(cert, c.ownerKey)).GetClusterInfo(ctxT(t), &cpb.GetClusterInfoRequest{})
	if err != nil {
		t.Fatalf("GetClusterInfo with the issued owner certificate: %v", err)
	}
	if !c.ca.Certificate().Equal(mustParseCert(t, info.ClusterDirectory.GetCaCertificate())) {
		t.Errorf("GetClusterInfo: the directory's CA is not the cluster CA")
	}

	// The owner renews by calling again, with its certificate this time.
	if _, err := cpb.NewAAAServiceClient(c.asUserCert(cert, c.ownerKey)).TakeOwnership(ctxT(t), &cpb.TakeOwnershipRequest{}); err != nil {
		t.Errorf("TakeOwnership with the owner certificate: %v", err)
	}
	// Every other key is refused (the permission test tries the other
	// kinds of caller).
	_, err = cpb.NewAAAServiceClient(c.asKeyHolder(mustKey(t))).TakeOwnership(ctxT(t), &cpb.TakeOwnershipRequest{})
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("TakeOwnership with another key: %v, want PermissionDenied", err)
	}
}

func mustParseCert(t testing.TB, der []byte) *x509.Certificate {
	t.Helper()
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}
