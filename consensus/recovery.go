package consensus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Recovery after quorum loss. A cluster whose majority of members is gone
// for good (their disks destroyed) cannot elect a leader and never serves
// again by itself. What is left is the data of a survivor: every write the
// cluster acknowledged is in a majority's logs, so the survivor holds all
// of them that it had applied, or at least everything up to a moment
// shortly before the loss.
//
// PrepareRecovery is run against the stopped survivor's data directory. It
// checks that recovery cannot fork a cluster that still lives: no other
// member may answer on its peer address, whatever the survivor believes
// of it. It then marks the directory: the next Run starts etcd with
// force-new-cluster, which keeps the data, the cluster ID and this
// member's ID, and makes the member the single voter of its membership
// (etcd commits the removal of every other member). Run records the
// recovery in etcd (Status.Recovery) and clears the mark once etcd serves,
// so the forced start happens once.
//
// The peer certificates of the lost members are still valid afterwards;
// the curator revokes them when it drops the lost members from its records
// (Status.Remove of a name with only a certificate left).

// ErrQuorumAlive is returned by PrepareRecovery when another member of the
// cluster answers: recovering this member alone would split the cluster in
// two.
var ErrQuorumAlive = errors.New("another consensus member answers: the cluster is not lost, and recovering this member alone would fork it")

// ErrAlone is returned by PrepareRecovery for a member that is already
// the only member of its cluster: there is nothing to recover (a node
// started again with the same recovery request finds this).
var ErrAlone = errors.New("this consensus member is already the only member of its cluster: nothing to recover")

// recoveryKey is where Run records the last recovery, in the internal key
// space.
const recoveryKey = internalPrefix + "recovery"

// probeTimeout bounds the dial of each other member's peer address.
const probeTimeout = 2 * time.Second

// Recovery describes a recovery of the cluster after it lost its quorum.
type Recovery struct {
	// At is when the recovered member first served again.
	At time.Time `json:"at"`
	// Member is the name of the member the cluster was recovered on.
	Member string `json:"member"`
	// From says what the data came from: RecoveryFromMemberData (the
	// member's own data directory) or RecoveryFromBackup (a snapshot
	// restored onto fresh storage, PrepareRestore).
	From string `json:"from"`
	// Lost are the names of the members dropped from the membership.
	Lost []string `json:"lost,omitempty"`
}

// RecoveryFromMemberData is Recovery.From for a recovery from a surviving
// member's own data.
const RecoveryFromMemberData = "member-data"

// peerMember is a member as etcd keeps it in its database's members bucket.
type peerMember struct {
	ID        uint64   `json:"id"`
	Name      string   `json:"name"`
	PeerURLs  []string `json:"peerURLs"`
	IsLearner bool     `json:"isLearner"`
}

// PrepareRecovery makes the stopped member in dataDir start, on its next
// Run, as the single member of its cluster with all its data (see above).
// It fails, changing nothing, if the directory holds no member that can
// be recovered, if etcd's database is damaged or in use, or (wrapping
// ErrQuorumAlive) if any other member answers on its peer address. It
// returns the names of the members the recovery will drop.
func PrepareRecovery(ctx context.Context, dataDir string) ([]string, error) {
	l := layout(dataDir)
	id, err := readIdentity(l)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s holds no consensus member's data: the node was never a consensus member, or its data is gone", dataDir)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the consensus member's identity: %w", err)
	}
	switch {
	case id.Removed:
		return nil, fmt.Errorf("%w: its data is stale and cannot recover the cluster", ErrRemoved)
	case id.MemberID == "":
		return nil, errors.New("the consensus member in this data directory never started: there is nothing to recover")
	}
	if err := checkDatabase(ctx, l.dbFile()); err != nil {
		return nil, err
	}
	members, err := readMembers(l.dbFile())
	if err != nil {
		return nil, err
	}
	var self *peerMember
	var others []peerMember
	for _, m := range members {
		if fmt.Sprintf("%x", m.ID) == id.MemberID {
			self = &m
		} else {
			others = append(others, m)
		}
	}
	if self == nil {
		return nil, fmt.Errorf("this member (%s) is not in the membership its own database records", id.MemberID)
	}
	if self.IsLearner {
		return nil, errors.New("this member is a learner: it may lack committed data and cannot recover the cluster; recover from a voter's data")
	}
	if len(others) == 0 {
		return nil, ErrAlone
	}
	var lost []string
	for _, m := range others {
		name := m.Name
		if name == "" {
			name = fmt.Sprintf("%x", m.ID)
		}
		for _, u := range m.PeerURLs {
			if addr, ok := answers(ctx, u); ok {
				return nil, fmt.Errorf("%w: member %s answers at %s; stop it for good first, or let the cluster heal", ErrQuorumAlive, name, addr)
			}
		}
		lost = append(lost, name)
	}
	slices.Sort(lost)
	id.Recover = &pendingRecovery{From: RecoveryFromMemberData, Lost: lost}
	if err := writeIdentity(l, id); err != nil {
		return nil, err
	}
	return lost, nil
}

// answers says whether anything accepts a connection at a peer URL.
func answers(ctx context.Context, peerURL string) (string, bool) {
	u, err := url.Parse(peerURL)
	if err != nil || u.Host == "" {
		return "", false
	}
	d := net.Dialer{Timeout: probeTimeout}
	c, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return "", false
	}
	c.Close()
	return u.Host, true
}

// readMembers reads the membership etcd keeps in its database, read-only
// (the database was checked first).
func readMembers(dbPath string) ([]peerMember, error) {
	db, err := bolt.Open(dbPath, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return nil, fmt.Errorf("opening etcd's database %s (is the node still running?): %w", dbPath, err)
	}
	defer db.Close()
	var out []peerMember
	err = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("members"))
		if b == nil {
			return errors.New("etcd's database holds no membership")
		}
		return b.ForEach(func(k, v []byte) error {
			var m peerMember
			if err := json.Unmarshal(v, &m); err != nil {
				return fmt.Errorf("member %s in etcd's database: %w", k, err)
			}
			out = append(out, m)
			return nil
		})
	})
	return out, err
}

// pendingRecovery is identity.json's mark of a recovery prepared and not
// yet carried out.
type pendingRecovery struct {
	From string   `json:"from"`
	Lost []string `json:"lost,omitempty"`
}

// finishRecovery records a recovery that etcd has carried out, then clears
// the mark, so that later starts are ordinary restarts.
func (m *member) finishRecovery(ctx context.Context, id *identity, logger *zap.Logger) error {
	// Every lease in the data was granted to a process of the cluster
	// before it was lost (nothing here has started a client yet): the
	// curator leader's election among them. Kept, it would make the
	// recovered curator wait out the lease of a leader that is gone.
	leases, err := m.cli.Leases(ctx)
	if err != nil {
		return fmt.Errorf("listing the leases of the lost cluster: %w", err)
	}
	for _, l := range leases.Leases {
		if _, err := m.cli.Revoke(ctx, l.ID); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return fmt.Errorf("revoking a lease of the lost cluster: %w", err)
		}
	}
	rec := Recovery{At: time.Now().UTC(), Member: m.cfg.Name, From: id.Recover.From, Lost: id.Recover.Lost}
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	ops := []clientv3.Op{clientv3.OpPut(recoveryKey, string(b))}
	if rec.From == RecoveryFromBackup {
		// A restored member's certificate was issued offline
		// (PrepareRestore): etcd learns of it here, as it learns of
		// the first member's at bootstrap, so that a later Remove
		// can revoke it.
		peerPEM, err := os.ReadFile(m.layout.peerCertFile())
		if err != nil {
			return fmt.Errorf("reading peer certificate: %w", err)
		}
		cert, err := parseCertPEM(peerPEM)
		if err != nil {
			return fmt.Errorf("parsing peer certificate: %w", err)
		}
		ops = append(ops, clientv3.OpPut(peerPrefix+m.cfg.Name, string(cert.Raw)))
	}
	if _, err := m.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
		return fmt.Errorf("recording the recovery: %w", err)
	}
	id.Recover = nil
	if err := writeIdentity(m.layout, id); err != nil {
		return fmt.Errorf("clearing the recovery mark: %w", err)
	}
	logger.Warn("recovered the cluster as its single member", zap.String("from", rec.From), zap.Strings("lost", rec.Lost), zap.Int("leases_revoked", len(leases.Leases)))
	return nil
}

// Recovery returns the cluster's last recovery after quorum loss, or nil if
// it never had one.
func (s *Status) Recovery(ctx context.Context) (*Recovery, error) {
	m, err := s.running()
	if err != nil {
		return nil, err
	}
	resp, err := m.cli.Get(ctx, recoveryKey)
	if err != nil {
		return nil, fmt.Errorf("reading the recovery record: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	var r Recovery
	if err := json.Unmarshal(resp.Kvs[0].Value, &r); err != nil {
		return nil, fmt.Errorf("parsing the recovery record: %w", err)
	}
	return &r, nil
}
