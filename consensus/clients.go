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
