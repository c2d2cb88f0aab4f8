package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"time"
)

// Lifetimes. The CA outlives every certificate it issues by years; leaves
// last a year and are reissued well before (by whoever keeps them).
const (
	CALifetime   = 10 * 365 * 24 * time.Hour
	LeafLifetime = 365 * 24 * time.Hour
	// clockSkew backdates NotBefore, so a certificate issued on one node
	// is valid on another whose clock is a little behind.
	clockSkew = 5 * time.Minute
)

// Users and groups of the components' client certificates: the names the
// apiserver's default RBAC policy grants their permissions to.
const (
	ControllerManagerUser = "system:kube-controller-manager"
	SchedulerUser         = "system:kube-scheduler"
	// APIServerKubeletUser is the apiserver's user name towards kubelets.
	APIServerKubeletUser = "polis:apiserver-kubelet-client"
	// ReadyzProbeUser is the controller node's agent asking its apiserver's
	// /readyz, in no group: Kubernetes lets every user read the health
	// endpoints (system:public-info-viewer), and a named user keeps the
	// probe's connection, which the apiserver closes after each request
	// of an anonymous client.
	ReadyzProbeUser = "polis:readyz-probe"
	// NodeUserPrefix and NodesGroup name a kubelet: system:node:<node
	// name> in system:nodes is whom the Node authorizer and the
	// NodeRestriction admission plugin confine to its own Node and Pods.
	NodeUserPrefix = "system:node:"
	NodesGroup     = "system:nodes"
	// MastersGroup is Kubernetes' superuser group (cluster-admin), for the
	// cluster's owner.
	MastersGroup = "system:masters"
	// ProxyUser is kube-proxy's user on every worker node: Kubernetes'
	// default policy binds it to system:node-proxier.
	ProxyUser = "system:kube-proxy"
	// DNSUser is the node DNS server's user on every worker node, bound by
	// kube/controlplane to reading Services, EndpointSlices and Namespaces.
	DNSUser = "polis:dns"
)

// ServiceNames are the in-cluster DNS names of the kubernetes service,
// which the apiserver's serving certificate must carry for clients inside
// the cluster.
var ServiceNames = []string{
	"kubernetes",
	"kubernetes.default",
	"kubernetes.default.svc",
	"kubernetes.default.svc.cluster.local",
}

// Cluster is the Kubernetes PKI shared by every controller node of one
// cluster. It is created once (NewCluster) and kept as its PEM fields.
type Cluster struct {
	// CACert and CAKey are the Kubernetes CA (PEM certificate, PEM PKCS#8
	// key).
	CACert, CAKey []byte
	// ServiceAccountKey signs service-account tokens (PEM PKCS#8 key); its
	// public half verifies them.
	ServiceAccountKey []byte
}

// Pair is a certificate and its key, both PEM.
type Pair struct {
	Cert, Key []byte
}

// NewCluster creates a cluster's Kubernetes CA and service-account key,
// valid from now.
func NewCluster(clusterName string, now time.Time) (*Cluster, error) {
	if clusterName == "" {
		return nil, errors.New("pki: empty cluster name")
	}
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "Kubernetes CA of " + clusterName},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(CALifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	certPEM, err := sign(tmpl, nil, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("pki: signing the CA: %w", err)
	}
	saKey, err := newKey()
	if err != nil {
		return nil, err
	}
	caKeyPEM, err := marshalKey(key)
	if err != nil {
		return nil, err
	}
	saKeyPEM, err := marshalKey(saKey)
	if err != nil {
		return nil, err
	}
	return &Cluster{CACert: certPEM, CAKey: caKeyPEM, ServiceAccountKey: saKeyPEM}, nil
}

// ServiceAccountPublicKey is the PEM public half of ServiceAccountKey, which
// the apiserver verifies tokens with.
func (c *Cluster) ServiceAccountPublicKey() ([]byte, error) {
	key, err := parseKey(c.ServiceAccountKey)
	if err != nil {
		return nil, fmt.Errorf("pki: service-account key: %w", err)
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// IssueServing issues the serving certificate of one controller node's
// apiserver: valid for the node's addresses, the in-cluster service address
// (the first address of the service range) and ServiceNames, plus
// extraNames (e.g. "localhost").
func (c *Cluster) IssueServing(addrs []netip.Addr, serviceIP netip.Addr, extraNames []string, now time.Time) (Pair, error) {
	if len(addrs) == 0 {
		return Pair{}, errors.New("pki: a serving certificate needs at least one node address")
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    append(append([]string{}, ServiceNames...), extraNames...),
	}
	for _, a := range append(append([]netip.Addr{}, addrs...), serviceIP) {
		if !a.IsValid() {
			return Pair{}, fmt.Errorf("pki: invalid address %v for a serving certificate", a)
		}
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.IP(a.AsSlice()))
	}
	return c.issue(tmpl, now)
}

// IssueClient issues a client certificate for the Kubernetes user name in
// groups, as the apiserver reads them (CommonName and Organizations).
func (c *Cluster) IssueClient(user string, groups []string, now time.Time) (Pair, error) {
	if user == "" {
		return Pair{}, errors.New("pki: a client certificate needs a user name")
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: user, Organization: groups},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	return c.issue(tmpl, now)
}

// issue signs tmpl for a fresh key with the CA, for LeafLifetime from now.
func (c *Cluster) issue(tmpl *x509.Certificate, now time.Time) (Pair, error) {
	ca, caKey, err := c.ca()
	if err != nil {
		return Pair{}, err
	}
	key, err := newKey()
	if err != nil {
		return Pair{}, err
	}
	tmpl.NotBefore = now.Add(-clockSkew)
	tmpl.NotAfter = now.Add(LeafLifetime)
	if tmpl.NotAfter.After(ca.NotAfter) {
		tmpl.NotAfter = ca.NotAfter
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	certPEM, err := sign(tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return Pair{}, fmt.Errorf("pki: signing %q: %w", tmpl.Subject.CommonName, err)
	}
	keyPEM, err := marshalKey(key)
	if err != nil {
		return Pair{}, err
	}
	return Pair{Cert: certPEM, Key: keyPEM}, nil
}

// ca parses the CA certificate and key, checking that they belong together.
func (c *Cluster) ca() (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cert, err := ParseCertificate(c.CACert)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: CA certificate: %w", err)
	}
	key, err := parseKey(c.CAKey)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: CA key: %w", err)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, nil, errors.New("pki: the CA key does not belong to the CA certificate")
	}
	return cert, key, nil
}

// ParseCertificate parses one PEM certificate.
func ParseCertificate(pemBytes []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(pemBytes)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM CERTIFICATE block")
	}
	return x509.ParseCertificate(block.Bytes)
}

func newKey() (*ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: generating a key: %w", err)
	}
	return key, nil
}

func marshalKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("pki: encoding a key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func parseKey(pemBytes []byte) (*ecdsa.PrivateKey, error) {
	block, _ := pem.Decode(pemBytes)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, errors.New("no PEM PRIVATE KEY block")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, err
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("a %T, not an ECDSA key", k)
	}
	return key, nil
}

// sign signs tmpl (self-signed when parent is nil) with a fresh serial
// number and the subject key id of pub.
func sign(tmpl, parent *x509.Certificate, pub *ecdsa.PublicKey, parentKey crypto.Signer) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	tmpl.SerialNumber = serial
	pubDER, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(pubDER)
	tmpl.SubjectKeyId = sum[:20]
	if parent == nil {
		parent = tmpl
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, parentKey)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}
