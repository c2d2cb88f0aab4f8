package consensus

import (
	"fmt"
	"regexp"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/namespace"
)

// Key space.
//
//	/consensus/...          internal: CA, CRL, issued peer certificates
//	/namespace/<user>/...   one namespace per user, see ClientFor
//
// A user name cannot contain "/", so no namespace prefix is a prefix of
// another, and none reaches into /consensus/. Nothing else in the key space
// is used.
const (
	internalPrefix  = "/consensus/"
	namespacePrefix = "/namespace/"
)

// UserRegexp is what ClientFor's user names must match. It is anchored, and
// excludes "/" so that namespaces cannot nest or collide.
var UserRegexp = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)

// ClientFor returns an etcd client confined to the namespace of user: every
// key it reads, writes, watches or attaches to a lease is transparently
// prefixed with /namespace/<user>/, so users (the curator, a test, a future
// service) cannot see or clobber each other's keys nor the internal ones.
//
// The client offers KV, Watcher and Lease, which is what
// go.etcd.io/etcd/client/v3/concurrency needs for elections and locks. Its
// Cluster, Maintenance and Auth fields are nil on purpose: membership goes
// through the Status methods, which keep certificates and the CRL in step.
//
// The client shares this member's connection to the local socket; the
// caller must Close it, and it stops working when this Status' Run ends.
func (s *Status) ClientFor(user string) (*clientv3.Client, error) {
	m, err := s.running()
	if err != nil {
		return nil, err
	}
	if !UserRegexp.MatchString(user) {
		return nil, fmt.Errorf("consensus user %q does not match %s", user, UserRegexp)
	}
	prefix := namespacePrefix + user + "/"
	c := clientv3.NewCtxClient(m.cli.Ctx(), clientv3.WithZapLogger(m.cli.GetLogger().Named(user)))
	c.KV = namespace.NewKV(m.cli.KV, prefix)
	// The watcher and lessor are this client's own (over the shared
	// connection), so that closing this client stops only its watches and
	// keepalives.
	c.Watcher = namespace.NewWatcher(clientv3.NewWatcher(m.cli), prefix)
	c.Lease = namespace.NewLease(clientv3.NewLease(m.cli), prefix)
	return c, nil
}

// Connection is a user's namespace reached over a gRPC connection of its
// own to the local member: what a proxy needs that serves the namespace to
// another process and forwards etcd's watch and lease streams one to one
// (kube/etcdproxy, through which kube-apiserver reaches the namespace
// "kubernetes"). A namespaced client from ClientFor cannot be that proxy's
// upstream, since it has no connection of its own to forward streams on.
//
// The confinement is then the proxy's job: Client reaches the whole key
// space, and Prefix is the namespace the proxy must confine every key,
// range, watch and lease to. Hand Client to nothing that does not confine;
// a component of the node that only needs its own keys takes ClientFor.
type Connection struct {
	// Prefix is the namespace's key prefix, /namespace/<user>/, the same
	// that ClientFor(user) confines to.
	Prefix string
	// Client is unconfined, with a live connection (ActiveConnection) to
	// the local member's client socket.
	Client *clientv3.Client
}

// Close closes the connection.
func (c *Connection) Close() error { return c.Client.Close() }

// ConnectionFor returns a Connection to the namespace of user (see
// Connection for what it is for, and ClientFor for the namespaces). The
// caller must Close it; it stops working when this Status' Run ends.
func (s *Status) ConnectionFor(user string) (*Connection, error) {
	m, err := s.running()
	if err != nil {
		return nil, err
	}
	if !UserRegexp.MatchString(user) {
		return nil, fmt.Errorf("consensus user %q does not match %s", user, UserRegexp)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{"unix://" + m.cfg.ClientSocket},
		DialTimeout: clientDialTimeout,
		Logger:      m.cli.GetLogger().Named(user),
	})
	if err != nil {
		return nil, fmt.Errorf("connecting to the local etcd for %s: %w", user, err)
	}
	return &Connection{Prefix: namespacePrefix + user + "/", Client: cli}, nil
}
