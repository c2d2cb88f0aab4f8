package consensus

import (
	"crypto/ed25519"
	"crypto/x509"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"regexp"
	"time"
)

// Config describes one consensus member. New validates it and fills in
// defaults; the zero value of every optional field means "the default".
type Config struct {
	// Name is this member's name in etcd, unique in the cluster and stable
	// for the member's lifetime (Polis uses the node ID). It must match
	// NameRegexp.
	Name string

	// DataDir holds everything the member persists: etcd's data, the peer
	// credentials, the CA certificate, the CRL file and identity.json, which
	// ties the directory to one member of one cluster. It is created with
	// mode 0700 if missing.
	DataDir string

	// PeerAddress is the IP:port other members reach this member at. It is
	// advertised to the cluster and written into the peer certificate, so it
	// must be an IP address (not a name) and cannot change over the member's
	// lifetime.
	PeerAddress string

	// ListenAddress is the IP:port the peer server binds to. It defaults to
	// PeerAddress; set it to listen on another address (for example 0.0.0.0
	// behind NAT). Port 0 is not supported: the advertised port must be known
	// before etcd starts.
	ListenAddress string

	// ClientSocket is the path of the unix socket etcd serves its clients on.
	// It defaults to DataDir/client.sock. Access to it is access to the whole
	// key space, so it must live in a directory only the node agent can
	// reach; nothing ever serves clients over the network.
	ClientSocket string

	// PeerKey is this member's peer TLS key. A joining member must set it:
	// its public key is the one handed to AddLearner. A bootstrapping member
	// may leave it nil to get a fresh key. On restart it is optional and, if
	// set, must match the key in DataDir.
	PeerKey ed25519.PrivateKey

	// Bootstrap creates a new cluster with this member as its only voter when
	// DataDir is empty. On a DataDir that already holds this member, it is
	// ignored (the member restarts).
	Bootstrap bool

	// Join makes this member join an existing cluster as a learner when
	// DataDir is empty. On a DataDir that already holds this member of this
	// cluster (same CA), it is ignored (the member restarts).
	Join *JoinData

	// HeartbeatInterval and ElectionTimeout are etcd's raft timings,
	// defaulting to 100ms and 1s. ElectionTimeout must be at least five
	// heartbeats. Raise both for members on slow or emulated machines.
	HeartbeatInterval time.Duration
	ElectionTimeout   time.Duration
}

// JoinData is what a joining member needs, as returned by AddLearner on a
// member of the cluster. It contains no secret: the joiner's private key
// never leaves the joiner.
type JoinData struct {
	// CACertificate is the DER of the cluster's peer CA certificate.
	CACertificate []byte
	// PeerCertificate is the DER of the joiner's peer certificate.
	PeerCertificate []byte
	// Peers are all members of the cluster, the joiner included.
	Peers []Peer
	// CRL is the DER of the current revocation list, so that the joiner
	// rejects revoked members from its very first connection.
	CRL []byte
}

// Peer names a member and its peer address.
type Peer struct {
	// Name is the member name. For a member that was added but has not
	// started yet it is the name it was added with, or its hexadecimal etcd
	// ID if that is unknown.
	Name string
	// Address is the member's peer IP:port.
	Address string
}

// NameRegexp is what member names must match. It is anchored: names end up
// in certificates, file contents and etcd's initial-cluster string, where a
// comma or an equals sign would change the meaning.
var NameRegexp = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._-]{0,127}$`)

// Defaults applied by New.
const (
	DefaultHeartbeatInterval = 100 * time.Millisecond
	DefaultElectionTimeout   = time.Second
	// maxSocketPath is the size of sockaddr_un.sun_path on Linux, minus the
	// terminating NUL.
	maxSocketPath = 107
)

// validate checks c and fills in its defaults. It does not touch the disk.
func (c *Config) validate() error {
	if !NameRegexp.MatchString(c.Name) {
		return fmt.Errorf("name %q does not match %s", c.Name, NameRegexp)
	}
	if c.DataDir == "" {
		return errors.New("DataDir is required")
	}
	abs, err := filepath.Abs(c.DataDir)
	if err != nil {
		return fmt.Errorf("DataDir: %w", err)
	}
	c.DataDir = abs
	peer, err := parseAddress(c.PeerAddress)
	if err != nil {
		return fmt.Errorf("PeerAddress: %w", err)
	}
	if peer.Addr().IsUnspecified() {
		return fmt.Errorf("PeerAddress %s: must be an address other members can reach, not unspecified", peer)
	}
	c.PeerAddress = peer.String()
	if c.ListenAddress == "" {
		c.ListenAddress = c.PeerAddress
	}
	listen, err := parseAddress(c.ListenAddress)
	if err != nil {
		return fmt.Errorf("ListenAddress: %w", err)
	}
	c.ListenAddress = listen.String()
	if c.ClientSocket == "" {
		c.ClientSocket = filepath.Join(c.DataDir, "client.sock")
	}
	if c.ClientSocket, err = filepath.Abs(c.ClientSocket); err != nil {
		return fmt.Errorf("ClientSocket: %w", err)
	}
	if len(c.ClientSocket) > maxSocketPath {
		return fmt.Errorf("ClientSocket %q: longer than %d bytes, the limit for unix sockets", c.ClientSocket, maxSocketPath)
	}
	if c.PeerKey != nil && len(c.PeerKey) != ed25519.PrivateKeySize {
		return fmt.Errorf("PeerKey: %d bytes, want %d", len(c.PeerKey), ed25519.PrivateKeySize)
	}
	if c.Bootstrap && c.Join != nil {
		return errors.New("only one of Bootstrap and Join may be set")
	}
	if c.Join != nil {
		if c.PeerKey == nil {
			return errors.New("joining requires PeerKey: the key whose public half was given to AddLearner")
		}
		if err := c.Join.validate(); err != nil {
			return fmt.Errorf("join data: %w", err)
		}
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.ElectionTimeout == 0 {
		c.ElectionTimeout = DefaultElectionTimeout
	}
	if c.HeartbeatInterval < time.Millisecond {
		return fmt.Errorf("HeartbeatInterval %s: must be at least 1ms", c.HeartbeatInterval)
	}
	if c.ElectionTimeout < 5*c.HeartbeatInterval {
		return fmt.Errorf("ElectionTimeout %s: must be at least 5 heartbeats (%s)", c.ElectionTimeout, 5*c.HeartbeatInterval)
	}
	return nil
}

// validate checks that the join data is complete and self-consistent; the
// checks against the joiner's own config happen when the data dir is
// prepared.
func (j *JoinData) validate() error {
	if _, err := x509.ParseCertificate(j.CACertificate); err != nil {
		return fmt.Errorf("CACertificate: %w", err)
	}
	if _, err := x509.ParseCertificate(j.PeerCertificate); err != nil {
		return fmt.Errorf("PeerCertificate: %w", err)
	}
	if _, err := x509.ParseRevocationList(j.CRL); err != nil {
		return fmt.Errorf("CRL: %w", err)
	}
	if len(j.Peers) == 0 {
		return errors.New("no peers")
	}
	seen := make(map[string]bool)
	for _, p := range j.Peers {
		if !NameRegexp.MatchString(p.Name) {
			return fmt.Errorf("peer name %q does not match %s", p.Name, NameRegexp)
		}
		if seen[p.Name] {
			return fmt.Errorf("peer name %q appears twice", p.Name)
		}
		seen[p.Name] = true
		if _, err := parseAddress(p.Address); err != nil {
			return fmt.Errorf("peer %q: %w", p.Name, err)
		}
	}
	return nil
}

// parseAddress parses an IP:port with a non-zero port.
func parseAddress(s string) (netip.AddrPort, error) {
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("%q is not an IP:port: %w", s, err)
	}
	if ap.Port() == 0 {
		return netip.AddrPort{}, fmt.Errorf("%q: port 0 is not supported (etcd advertises the port before it listens)", s)
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
}

// peerURL is the etcd peer URL of a peer address. Peers always speak TLS.
func peerURL(ap netip.AddrPort) string {
	return "https://" + ap.String()
}
