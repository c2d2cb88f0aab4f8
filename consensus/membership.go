package consensus

import (
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/etcdserver/api/membership"
	"go.uber.org/zap"

	"github.com/polis-os/polis/supervisor"
)

// Membership changes. They are methods of a running, voting Status because
// they need a member that can write to etcd; the curator calls them on its
// local member. Each keeps etcd's membership, the issued certificates
// (peerPrefix) and the CRL in step:
//
//	AddLearner  issue a certificate, record it, add the learner, hand back JoinData
//	Promote     make a caught-up learner a voter (joiners also do it themselves)
//	Remove      remove the member, revoke its certificate, forget the certificate
//
// Concurrent changes for the same name are not serialised here: the curator
// serialises membership changes.

// Promotion backoff of a joining member: etcd refuses a promotion until the
// learner has caught up with the leader's log, which takes a few round trips
// on a fresh cluster and longer on a big one. The cap is short because an
// attempt is cheap (the leader compares two log indexes) and every second
// of it is a second a ready learner waits.
const (
	promoteInitialBackoff  = 100 * time.Millisecond
	promoteMaxBackoff      = time.Second
	reconfigInitialBackoff = 200 * time.Millisecond
	reconfigMaxBackoff     = 2 * time.Second
)

// promoteAttemptTimeout bounds one promotion attempt. Raft takes one
// configuration change at a time and drops a second proposed while the
// first is not applied yet, without an answer: with two learners
// promoting themselves at once, one attempt may wait for nothing, and
// this is what it costs. An attempt cut short while its change is still
// on its way costs nothing either: the next finds the member promoted, or
// proposes again.
const promoteAttemptTimeout = time.Second

// MaxLearners is how many learners the cluster admits at once (etcd's
// max-learners, 1 by default), given to every member. Two, so that the
// members a cluster is formed with (polis-launch's second and third
// nodes) join together rather than one after the other: a learner does not
// vote, so adding one never changes the quorum, and while the cluster has
// a single voter etcd's strict reconfiguration check lets a member be
// added at once, where with two voters it waits until the local member
// has been connected to the other for five seconds (etcdserver's
// HealthInterval). Each learner then promotes itself once it has caught
// up. The value is part of the cluster's protocol: etcd checks each
// learner add against the limit of every member that applies it, so
// members with different limits would disagree on the membership; every
// member must run with this one (Polis clusters run one release).
const MaxLearners = 2

// ErrNoMember is returned when a membership change names no known member.
var ErrNoMember = errors.New("no such consensus member")

// Member describes one member of the cluster, as Members lists it.
type Member struct {
	// Name is the member name (for a member that has not started yet, the
	// name its certificate was issued for, or its hexadecimal ID).
	Name string
	// ID is etcd's member ID.
	ID uint64
	// Address is the member's peer IP:port.
	Address string
	// Learner is true until the member is promoted.
	Learner bool
	// Started is false for a member that was added but has not yet
	// connected to the cluster.
	Started bool
}

// Members lists the members of the cluster.
func (s *Status) Members(ctx context.Context) ([]Member, error) {
	m, err := s.running()
	if err != nil {
		return nil, err
	}
	resp, err := m.cli.MemberList(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing members: %w", err)
	}
	names, err := m.certNames(ctx)
	if err != nil {
		return nil, err
	}
	return toMembers(resp.Members, names), nil
}

// AddLearner adds a new member as a learner: it issues the member's peer
// certificate for pub (the member's peer key, which never leaves it),
// records it, adds the member to etcd and returns what the new member needs
// to join (Config.Join). The new member promotes itself once it has caught
// up.
//
// A certificate issued earlier to the same name for a join that never
// happened is revoked first, so that at most one certificate per name is
// valid.
func (s *Status) AddLearner(ctx context.Context, name, peerAddress string, pub ed25519.PublicKey) (*JoinData, error) {
	m, err := s.running()
	if err != nil {
		return nil, err
	}
	if !NameRegexp.MatchString(name) {
		return nil, fmt.Errorf("member name %q does not match %s", name, NameRegexp)
	}
	addr, err := parseAddress(peerAddress)
	if err != nil {
		return nil, fmt.Errorf("peer address: %w", err)
	}
	if len(pub) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("peer public key: %d bytes, want %d", len(pub), ed25519.PublicKeySize)
	}
	existing, err := s.Members(ctx)
	if err != nil {
		return nil, err
	}
	for _, e := range existing {
		if e.Name == name || e.Address == addr.String() {
			return nil, fmt.Errorf("adding %q at %s: conflicts with member %q at %s", name, addr, e.Name, e.Address)
		}
	}
	c, err := loadCA(ctx, m.cli)
	if err != nil {
		return nil, err
	}
	if old, err := m.issuedCert(ctx, name); err != nil {
		return nil, err
	} else if old != nil {
		if err := revoke(ctx, m.cli, c, old.SerialNumber); err != nil {
			return nil, fmt.Errorf("revoking earlier certificate of %q: %w", name, err)
		}
	}
	cert, err := c.issuePeer(name, addr, pub, time.Now())
	if err != nil {
		return nil, err
	}
	if _, err := m.cli.Put(ctx, peerPrefix+name, string(cert.Raw)); err != nil {
		return nil, fmt.Errorf("recording certificate of %q: %w", name, err)
	}
	var resp *clientv3.MemberAddResponse
	err = retryUnhealthy(ctx, func() (err error) {
		resp, err = m.cli.MemberAddAsLearner(ctx, []string{peerURL(addr)})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("adding learner %q: %w", name, err)
	}
	names, err := m.certNames(ctx)
	if err != nil {
		return nil, err
	}
	names[peerURL(addr)] = name
	crl, err := m.cli.Get(ctx, crlKey)
	if err != nil {
		return nil, fmt.Errorf("reading CRL: %w", err)
	}
	if len(crl.Kvs) != 1 {
		return nil, errors.New("CRL not found in etcd")
	}
	jd := &JoinData{
		CACertificate:   c.cert.Raw,
		PeerCertificate: cert.Raw,
		CRL:             crl.Kvs[0].Value,
	}
	for _, mem := range toMembers(resp.Members, names) {
		jd.Peers = append(jd.Peers, Peer{Name: mem.Name, Address: mem.Address})
	}
	supervisor.Logger(ctx).Info("added consensus learner", zap.String("name", name), zap.Stringer("address", addr), zap.String("id", memberIDString(resp.Member.ID)))
	return jd, nil
}

// retryUnhealthy runs change until etcd stops refusing it for lack of
// health. etcd's strict reconfiguration check refuses membership changes
// until every voter needed for quorum has been connected for five seconds
// (etcdserver.HealthInterval), which is never the case right after a
// promotion: joins or removals in a row would otherwise fail one time in
// two. ctx bounds the wait, so a cluster that really lost a member still
// fails the call.
func retryUnhealthy(ctx context.Context, change func() error) error {
	backoff := reconfigInitialBackoff
	for {
		err := change()
		if !errors.Is(err, rpctypes.ErrUnhealthy) {
			return err
		}
		if err := sleepCtx(ctx, backoff); err != nil {
			return fmt.Errorf("cluster still unhealthy: %w", err)
		}
		backoff = min(2*backoff, reconfigMaxBackoff)
	}
}

// Promote makes the learner name a voter. etcd refuses while the learner
// has not caught up; joining members retry by themselves (runPromoter), so
// this is for operators and tests.
func (s *Status) Promote(ctx context.Context, name string) error {
	m, err := s.running()
	if err != nil {
		return err
	}
	mem, err := s.find(ctx, name)
	if err != nil {
		return err
	}
	if mem == nil {
		return fmt.Errorf("promoting %q: %w", name, ErrNoMember)
	}
	err = retryUnhealthy(ctx, func() error {
		_, err := m.cli.MemberPromote(ctx, mem.ID)
		return err
	})
	if err != nil {
		return fmt.Errorf("promoting %q: %w", name, err)
	}
	return nil
}

// Remove removes member name from the cluster and revokes its peer
// certificate, so that it cannot rejoin the peer mesh with it even though it
// still holds its key and data.
//
// Membership goes first: the removed member then learns of its removal
// (from the log, or from the peers that answer "removed" to it) and stops,
// reporting ErrRemoved. Revoking first would cut it off before it could
// learn, leaving it running without a leader forever. Both steps are
// idempotent: if Remove fails half-way, calling it again finishes the job
// (a name that only has a certificate left just gets it revoked).
func (s *Status) Remove(ctx context.Context, name string) error {
	m, err := s.running()
	if err != nil {
		return err
	}
	mem, err := s.find(ctx, name)
	if err != nil {
		return err
	}
	cert, err := m.issuedCert(ctx, name)
	if err != nil {
		return err
	}
	if mem == nil && cert == nil {
		return fmt.Errorf("removing %q: %w", name, ErrNoMember)
	}
	if mem != nil {
		err := retryUnhealthy(ctx, func() error {
			_, err := m.cli.MemberRemove(ctx, mem.ID)
			return err
		})
		if err != nil {
			return fmt.Errorf("removing %q from etcd: %w", name, err)
		}
	}
	if cert != nil {
		c, err := loadCA(ctx, m.cli)
		if err != nil {
			return err
		}
		if err := revoke(ctx, m.cli, c, cert.SerialNumber); err != nil {
			return fmt.Errorf("revoking certificate of %q: %w", name, err)
		}
		if _, err := m.cli.Delete(ctx, peerPrefix+name); err != nil {
			return fmt.Errorf("forgetting certificate of %q: %w", name, err)
		}
	}
	supervisor.Logger(ctx).Info("removed consensus member", zap.String("name", name))
	return nil
}

// find returns the member called name, or nil if there is none.
func (s *Status) find(ctx context.Context, name string) (*Member, error) {
	members, err := s.Members(ctx)
	if err != nil {
		return nil, err
	}
	for _, mem := range members {
		if mem.Name == name {
			return &mem, nil
		}
	}
	return nil, nil
}

// issuedCert returns the certificate recorded for name, or nil.
func (m *member) issuedCert(ctx context.Context, name string) (*x509.Certificate, error) {
	resp, err := m.cli.Get(ctx, peerPrefix+name)
	if err != nil {
		return nil, fmt.Errorf("reading certificate of %q: %w", name, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	cert, err := x509.ParseCertificate(resp.Kvs[0].Value)
	if err != nil {
		return nil, fmt.Errorf("parsing certificate of %q: %w", name, err)
	}
	return cert, nil
}

// certNames maps peer URLs to member names from the issued certificates, to
// name members that have not started yet (etcd knows only their URL).
func (m *member) certNames(ctx context.Context) (map[string]string, error) {
	resp, err := m.cli.Get(ctx, peerPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("reading issued certificates: %w", err)
	}
	names := make(map[string]string)
	for _, kv := range resp.Kvs {
		cert, err := x509.ParseCertificate(kv.Value)
		if err != nil {
			return nil, fmt.Errorf("parsing certificate %s: %w", kv.Key, err)
		}
		if ap, ok := peerAddressOf(cert); ok {
			names[peerURL(ap)] = cert.Subject.CommonName
		}
	}
	return names, nil
}

// toMembers converts etcd's member list, naming unstarted members from names
// (peer URL → name).
func toMembers(ms []*etcdserverpb.Member, names map[string]string) []Member {
	var res []Member
	for _, em := range ms {
		mem := Member{Name: em.Name, ID: em.ID, Learner: em.IsLearner, Started: em.Name != ""}
		if len(em.PeerURLs) > 0 {
			if u, err := url.Parse(em.PeerURLs[0]); err == nil {
				if ap, err := netip.ParseAddrPort(u.Host); err == nil {
					mem.Address = ap.String()
				}
			}
			if mem.Name == "" {
				mem.Name = names[em.PeerURLs[0]]
			}
		}
		if mem.Name == "" {
			mem.Name = memberIDString(em.ID)
		}
		res = append(res, mem)
	}
	return res
}

// runPromoter promotes this learner as soon as etcd accepts it. It talks to
// etcd's server directly: a learner's gRPC API refuses member changes, but
// the server forwards a promotion to the leader over the peer connection.
func (m *member) runPromoter(ctx context.Context) error {
	logger := supervisor.Logger(ctx)
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	backoff := promoteInitialBackoff
	for {
		learner, err := m.isLearner()
		if err != nil {
			return err
		}
		if !learner {
			break
		}
		actx, cancel := context.WithTimeout(ctx, promoteAttemptTimeout)
		_, err = m.etcd.Server.PromoteMember(actx, uint64(m.etcd.Server.MemberID()))
		cancel()
		if err == nil || errors.Is(err, membership.ErrMemberNotLearner) {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		logger.Debug("not promoted yet", zap.Error(err), zap.Duration("retry-in", backoff))
		if err := sleepCtx(ctx, backoff); err != nil {
			return err
		}
		backoff = min(2*backoff, promoteMaxBackoff)
	}
	logger.Info("promoted to voter")
	m.kickStatus()
	supervisor.Signal(ctx, supervisor.SignalDone)
	return nil
}
