package consensus

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/polis-os/polis/localstorage"
)

// ErrDataMismatch is returned (wrapped, with the details) when the data
// directory belongs to another member or another cluster than the
// configuration describes. Polis never "fixes" such a directory: wiping it
// could destroy the last copy of the cluster's state, and starting it under
// a new identity could split the cluster. An operator must look.
var ErrDataMismatch = errors.New("data directory does not match the configuration")

// layout names the files of a data directory.
//
//	DataDir/identity.json   which member of which cluster this is (commit point)
//	DataDir/etcd/           etcd's own data (WAL and snapshots)
//	DataDir/pki/ca.pem      the cluster's peer CA certificate
//	DataDir/pki/peer.pem    this member's peer certificate
//	DataDir/pki/peer.key    this member's peer key (0600)
//	DataDir/pki/crl.der     mirror of the CRL in etcd, read by etcd per connection
//	DataDir/pki/ca.key      the CA key, only between a bootstrap's first
//	                        start and the moment it is stored in etcd (0600)
//
// Every file is written through localstorage.File, so that a reader (or a
// crash) sees the old content or the new one, never a torn file: etcd
// re-reads the CRL file on every peer connection, and a half-written key
// after a power loss would brick the member. Secret files (0600) live in
// 0700 directories, which prepare creates.
type layout string

func (l layout) identityFile() string { return filepath.Join(string(l), "identity.json") }
func (l layout) etcdDir() string      { return filepath.Join(string(l), "etcd") }
func (l layout) pkiDir() string       { return filepath.Join(string(l), "pki") }
func (l layout) caFile() string       { return filepath.Join(l.pkiDir(), "ca.pem") }
func (l layout) peerCertFile() string { return filepath.Join(l.pkiDir(), "peer.pem") }
func (l layout) peerKeyFile() string  { return filepath.Join(l.pkiDir(), "peer.key") }
func (l layout) crlFile() string      { return filepath.Join(l.pkiDir(), "crl.der") }
func (l layout) caKeyFile() string    { return filepath.Join(l.pkiDir(), "ca.key") }

// identityJSON is identity.json as a localstorage.File: checksummed, like the
// CA key, since only this package reads them.
func (l layout) identityJSON() localstorage.File {
	return localstorage.File{Path: l.identityFile(), Secret: true,
		Advice: "it says which etcd member of which cluster the directory holds; restore it from a backup, or, if the cluster has other members, take ConsensusMember from the node, remove " + string(l) + " and give the role back"}
}

func (l layout) caKey() localstorage.File {
	return localstorage.File{Path: l.caKeyFile(), Secret: true,
		Advice: "the new cluster's CA key was never stored in etcd: wipe the node's storage and bootstrap again"}
}

// etcdFile is one of the files etcd's TLS reads itself: written plain (etcd
// knows no checksum), checked by their own structure (PEM, signatures
// against the CA, whose fingerprint identity.json records).
func etcdFile(path string, secret bool) localstorage.File {
	return localstorage.File{Path: path, Secret: secret, Plain: true}
}

// identity is what identity.json records. It is written once the PKI files
// are in place and before etcd first starts, so that every later start —
// including one after a crash during the very first start — replays the same
// etcd configuration rather than bootstrapping or joining a second time.
type identity struct {
	Name    string `json:"name"`
	PeerURL string `json:"peer_url"`
	// CAFingerprint is the SHA-256 of the CA certificate's DER: the cluster's
	// identity as far as this member can check it without etcd.
	CAFingerprint string `json:"ca_sha256"`
	// InitialCluster, InitialClusterState and InitialClusterToken are the
	// etcd flags of the first start, replayed on every start (etcd ignores
	// them once its WAL exists).
	InitialCluster      string `json:"initial_cluster"`
	InitialClusterState string `json:"initial_cluster_state"`
	InitialClusterToken string `json:"initial_cluster_token,omitempty"`
	// ClusterID and MemberID are etcd's IDs (hex), recorded after the first
	// successful start and checked on every later one.
	ClusterID string `json:"cluster_id,omitempty"`
	MemberID  string `json:"member_id,omitempty"`
	// Removed is set once the member has seen itself removed from the
	// cluster; the directory is then dead (see ErrRemoved).
	Removed bool `json:"removed,omitempty"`
	// Recover, set by PrepareRecovery, makes the next start force a new
	// cluster of this member alone; cleared once that start serves.
	Recover *pendingRecovery `json:"recover,omitempty"`
}

func readIdentity(l layout) (*identity, error) {
	data, err := l.identityJSON().Read()
	if err != nil {
		return nil, err
	}
	var id identity
	if err := json.Unmarshal(data, &id); err != nil {
		return nil, fmt.Errorf("parsing %s: %w", l.identityFile(), err)
	}
	return &id, nil
}

func writeIdentity(l layout, id *identity) error {
	data, err := json.MarshalIndent(id, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding identity: %w", err)
	}
	return l.identityJSON().Write(append(data, '\n'))
}

// prepare makes the data directory ready for etcd to start and returns the
// member's identity: it checks an existing directory against the
// configuration, or creates the PKI and identity of a bootstrap or join.
func prepare(cfg *Config, logger *zap.Logger) (*identity, error) {
	l := layout(cfg.DataDir)
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating data directory: %w", err)
	}
	id, err := readIdentity(l)
	switch {
	case err == nil:
		if err := checkExisting(cfg, l, id); err != nil {
			return nil, err
		}
		logger.Info("restarting from data directory", zap.String("dir", cfg.DataDir), zap.String("cluster-id", id.ClusterID), zap.String("member-id", id.MemberID))
		return id, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("reading identity: %w", err)
	}

	// No identity: etcd has never been started here. Anything in pki/ is
	// the leftover of a preparation that crashed and was never used; etcd
	// data without an identity is not ours to interpret.
	if entries, err := os.ReadDir(l.etcdDir()); err == nil && len(entries) > 0 {
		return nil, fmt.Errorf("%w: %s holds etcd data but no identity.json", ErrDataMismatch, l.etcdDir())
	}
	if err := os.RemoveAll(l.pkiDir()); err != nil {
		return nil, fmt.Errorf("removing leftover PKI directory: %w", err)
	}
	if err := os.MkdirAll(l.pkiDir(), 0o700); err != nil {
		return nil, fmt.Errorf("creating PKI directory: %w", err)
	}
	switch {
	case cfg.Bootstrap:
		id, err = prepareBootstrap(cfg, l)
	case cfg.Join != nil:
		id, err = prepareJoin(cfg, l)
	default:
		return nil, fmt.Errorf("data directory %s is empty and neither Bootstrap nor Join is set", cfg.DataDir)
	}
	if err != nil {
		return nil, err
	}
	if err := writeIdentity(l, id); err != nil {
		return nil, err
	}
	logger.Info("data directory prepared", zap.String("dir", cfg.DataDir), zap.String("initial-cluster-state", id.InitialClusterState))
	return id, nil
}

// checkExisting refuses to start when the data directory was made for
// another member or another cluster.
func checkExisting(cfg *Config, l layout, id *identity) error {
	if id.Name != cfg.Name {
		return fmt.Errorf("%w: it belongs to member %q, configured name is %q", ErrDataMismatch, id.Name, cfg.Name)
	}
	want := peerURL(netip.MustParseAddrPort(cfg.PeerAddress))
	if id.PeerURL != want {
		return fmt.Errorf("%w: member was created with peer URL %s, configured %s (changing it needs a membership change)", ErrDataMismatch, id.PeerURL, want)
	}
	caPEM, err := os.ReadFile(l.caFile())
	if err != nil {
		return fmt.Errorf("reading CA certificate: %w", err)
	}
	caCert, err := parseCertPEM(caPEM)
	if err != nil {
		return fmt.Errorf("parsing %s: %w", l.caFile(), err)
	}
	if fp := fingerprint(caCert.Raw); fp != id.CAFingerprint {
		return fmt.Errorf("%w: %s has fingerprint %s, identity.json says %s", ErrDataMismatch, l.caFile(), fp, id.CAFingerprint)
	}
	if cfg.Join != nil {
		if fp := fingerprint(cfg.Join.CACertificate); fp != id.CAFingerprint {
			return fmt.Errorf("%w: it belongs to the cluster with CA %s, join data is for CA %s", ErrDataMismatch, id.CAFingerprint, fp)
		}
	}
	if cfg.PeerKey != nil {
		keyPEMData, err := os.ReadFile(l.peerKeyFile())
		if err != nil {
			return fmt.Errorf("reading peer key: %w", err)
		}
		key, err := parseKeyPEM(keyPEMData)
		if err != nil {
			return fmt.Errorf("parsing %s: %w", l.peerKeyFile(), err)
		}
		if !key.Equal(cfg.PeerKey) {
			return fmt.Errorf("%w: the peer key in it is not the configured PeerKey", ErrDataMismatch)
		}
	}
	return nil
}

// prepareBootstrap creates the CA, this member's credentials and an empty
// CRL. The CA key is kept on disk only until the first start stores it in
// etcd (see member.finishBootstrap).
func prepareBootstrap(cfg *Config, l layout) (*identity, error) {
	now := time.Now()
	c, err := newCA(now)
	if err != nil {
		return nil, err
	}
	key := cfg.PeerKey
	if key == nil {
		if _, key, err = ed25519.GenerateKey(rand.Reader); err != nil {
			return nil, fmt.Errorf("generating peer key: %w", err)
		}
	}
	addr := netip.MustParseAddrPort(cfg.PeerAddress)
	cert, err := c.issuePeer(cfg.Name, addr, key.Public().(ed25519.PublicKey), now)
	if err != nil {
		return nil, err
	}
	crl, err := newCRL(c, nil, nil, now)
	if err != nil {
		return nil, err
	}
	caKeyPEM, err := keyPEM(c.key)
	if err != nil {
		return nil, err
	}
	if err := l.caKey().Write(caKeyPEM); err != nil {
		return nil, err
	}
	if err := writePKI(l, c.cert.Raw, cert.Raw, key, crl); err != nil {
		return nil, err
	}
	token := make([]byte, 16)
	if _, err := rand.Read(token); err != nil {
		return nil, fmt.Errorf("generating cluster token: %w", err)
	}
	return &identity{
		Name:                cfg.Name,
		PeerURL:             peerURL(addr),
		CAFingerprint:       fingerprint(c.cert.Raw),
		InitialCluster:      cfg.Name + "=" + peerURL(addr),
		InitialClusterState: "new",
		InitialClusterToken: "polis-" + hex.EncodeToString(token),
	}, nil
}

// prepareJoin checks the join data against the configuration and writes it.
func prepareJoin(cfg *Config, l layout) (*identity, error) {
	j := cfg.Join
	caCert, err := x509.ParseCertificate(j.CACertificate)
	if err != nil {
		return nil, fmt.Errorf("parsing CA certificate: %w", err)
	}
	addr := netip.MustParseAddrPort(cfg.PeerAddress)
	if _, err := checkPeerCert(caCert, j.PeerCertificate, cfg.Name, addr, cfg.PeerKey.Public().(ed25519.PublicKey)); err != nil {
		return nil, fmt.Errorf("join data: %w", err)
	}
	if _, err := parseCRL(caCert, j.CRL); err != nil {
		return nil, fmt.Errorf("join data: %w", err)
	}
	var cluster []string
	self := false
	for _, p := range j.Peers {
		ap, err := parseAddress(p.Address)
		if err != nil {
			return nil, fmt.Errorf("join data: peer %q: %w", p.Name, err)
		}
		if p.Name == cfg.Name {
			if ap != addr {
				return nil, fmt.Errorf("join data lists this member at %s, configured PeerAddress is %s", ap, addr)
			}
			self = true
		}
		cluster = append(cluster, p.Name+"="+peerURL(ap))
	}
	if !self {
		return nil, fmt.Errorf("join data does not list this member (%q) among the peers", cfg.Name)
	}
	if err := writePKI(l, j.CACertificate, j.PeerCertificate, cfg.PeerKey, j.CRL); err != nil {
		return nil, err
	}
	return &identity{
		Name:                cfg.Name,
		PeerURL:             peerURL(addr),
		CAFingerprint:       fingerprint(j.CACertificate),
		InitialCluster:      strings.Join(cluster, ","),
		InitialClusterState: "existing",
	}, nil
}

// writePKI writes the files etcd's peer TLS reads.
func writePKI(l layout, caDER, certDER []byte, key ed25519.PrivateKey, crl []byte) error {
	kp, err := keyPEM(key)
	if err != nil {
		return err
	}
	if err := etcdFile(l.peerKeyFile(), true).Write(kp); err != nil {
		return err
	}
	if err := etcdFile(l.caFile(), false).Write(certPEM(caDER)); err != nil {
		return err
	}
	if err := etcdFile(l.peerCertFile(), false).Write(certPEM(certDER)); err != nil {
		return err
	}
	return etcdFile(l.crlFile(), false).Write(crl)
}

// HasMember reports whether dataDir holds a member that has started at
// least once and was not removed from its cluster: a node that lost the
// record of its roles can tell from it that it was a consensus member, and
// restart the member from its data.
func HasMember(dataDir string) (bool, error) {
	id, err := readIdentity(layout(dataDir))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading the consensus member's identity: %w", err)
	}
	return id.MemberID != "" && !id.Removed, nil
}
