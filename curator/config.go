package curator

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"net/netip"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/polis-os/polis/consensus"
	"github.com/polis-os/polis/event"
)

// DefaultHeartbeatInterval is how often nodes are asked to heartbeat; a node
// is judged unhealthy after missing heartbeatsUntilTimeout of them.
const DefaultHeartbeatInterval = 5 * time.Second

// DefaultMaxNewNodes is how many NEW records (nodes registered and not yet
// approved) the cluster holds at most, unless Config.MaxNewNodes says
// otherwise. With statuses of at most 1.5 KiB, that bounds what holders of
// the register ticket can make etcd store, and every watcher receive,
// without any operator's approval to well under a megabyte.
const DefaultMaxNewNodes = 512

// RegisterStatusInterval is how often at most a registered node's retry of
// Register replaces its stored status (see Register).
const RegisterStatusInterval = time.Minute

// heartbeatsUntilTimeout is how many intervals without a heartbeat make a
// node's health HEARTBEAT_TIMEOUT.
const heartbeatsUntilTimeout = 3

// Config describes one curator. New validates it.
type Config struct {
	// Client reaches etcd in the curator's namespace. The cluster's state
	// must have been initialised there by Bootstrap.
	Client *clientv3.Client
	// Consensus is this node's consensus member, used for membership
	// changes when roles change (add a learner, remove a member).
	Consensus event.ValueWatch[*consensus.Status]
	// NodeKey is this node's key. The curator serves with a node
	// certificate for it, issued from the cluster CA each time it starts.
	NodeKey ed25519.PrivateKey
	// ListenAddress is the IP:port to serve on. Port 0 picks a free port;
	// Status reports the one in use. There is no default: development
	// setups pass a loopback address, so nothing listens on the network
	// unless asked to.
	ListenAddress string
	// LeaseTTL is the leader's election lease; DefaultLeaseTTL if zero.
	LeaseTTL time.Duration
	// HeartbeatInterval is what nodes are told to use;
	// DefaultHeartbeatInterval if zero.
	HeartbeatInterval time.Duration
	// MaxNewNodes is the most NEW node records the cluster holds;
	// DefaultMaxNewNodes if zero. Register refuses new keys with
	// RESOURCE_EXHAUSTED beyond it, until an operator approves or deletes
	// some.
	MaxNewNodes int
	// Now is the clock, for tests; time.Now if nil.
	Now func() time.Time
}

func (c *Config) validate() error {
	var errs []error
	if c.Client == nil {
		errs = append(errs, errors.New("the Client field is required"))
	}
	if c.Consensus == nil {
		errs = append(errs, errors.New("the Consensus field is required"))
	}
	if len(c.NodeKey) != ed25519.PrivateKeySize {
		errs = append(errs, fmt.Errorf("NodeKey must be an ed25519 private key (%d bytes), not %d bytes", ed25519.PrivateKeySize, len(c.NodeKey)))
	}
	if ap, err := netip.ParseAddrPort(c.ListenAddress); err != nil {
		errs = append(errs, fmt.Errorf("ListenAddress %q: want IP:port: %w", c.ListenAddress, err))
	} else if ap.Addr().IsUnspecified() {
		errs = append(errs, fmt.Errorf("ListenAddress %q: an unspecified IP cannot be advertised to other nodes; give the node's address", c.ListenAddress))
	}
	if c.LeaseTTL < 0 || c.HeartbeatInterval < 0 || c.MaxNewNodes < 0 {
		errs = append(errs, errors.New("LeaseTTL, HeartbeatInterval and MaxNewNodes must not be negative"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("curator config: %w", err)
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.MaxNewNodes == 0 {
		c.MaxNewNodes = DefaultMaxNewNodes
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}
