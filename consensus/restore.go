package consensus

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
)

// Restore onto fresh storage. A backup (or an automatic snapshot) holds
// the whole key space of a cluster, the peer CA and its key among it, but
// no member's data directory: a member is its WAL, its place in etcd's
// membership and its peer credentials. PrepareRestore makes a new member's
// directory from a snapshot's database: etcd's own restore (etcdutl) lays
// out the database, a WAL and a membership of this one member, under a
// new etcd cluster ID, with the revision bumped past anything a watcher of
// the old cluster saw; the peer CA in the database issues the member's
// peer certificate. The old members are the lost ones: the first Run
// records the restore as a recovery (Status.Recovery, From
// RecoveryFromBackup), and the curator then drops them from its records as
// after a recovery from a survivor (their certificates revoked, their
// ConsensusMember taken).
//
// The directory is built beside its final place and renamed into it, so a
// crash leaves either no member or a whole one.

// RecoveryFromBackup is Recovery.From for a restore from a backup or a
// snapshot onto fresh storage.
const RecoveryFromBackup = "backup"

// restoreRevisionBump is how far a restore moves etcd's revision past the
// snapshot's: past every revision the old cluster can have reached after
// the snapshot was taken, so that no watcher sees it go back.
const restoreRevisionBump = 1_000_000_000

// RestoreConfig describes the member PrepareRestore makes.
type RestoreConfig struct {
	// DataDir is the new member's data directory (Config.DataDir); it
	// must not exist, or be empty.
	DataDir string
	// Name, PeerAddress and PeerKey are the new member's, as Config has
	// them for every later Run.
	Name        string
	PeerAddress string
	PeerKey     ed25519.PrivateKey
	// Database is a snapshot's bbolt database, without etcd's trailing
	// hash (as backup.Decrypt writes it). It is checked
	// (CheckSnapshotDatabase) and copied; the file itself is left alone.
	Database string
}

// ErrNotEmpty is returned by PrepareRestore for a data directory that
// holds something already.
var ErrNotEmpty = errors.New("the consensus data directory is not empty")

// PrepareRestore makes, in cfg.DataDir, a member that holds the
// snapshot's data as the single member of a restored cluster (see
// above). It returns the names of the old members, which the first Run
// records as lost. On failure nothing is left in cfg.DataDir.
func PrepareRestore(ctx context.Context, cfg RestoreConfig, logger *zap.Logger) ([]string, error) {
	if !NameRegexp.MatchString(cfg.Name) {
		return nil, fmt.Errorf("name %q does not match %s", cfg.Name, NameRegexp)
	}
	addr, err := parseAddress(cfg.PeerAddress)
	if err != nil {
		return nil, fmt.Errorf("PeerAddress: %w", err)
	}
	if len(cfg.PeerKey) != ed25519.PrivateKeySize {
		return nil, errors.New("PeerKey: not an ed25519 private key")
	}
	if entries, err := os.ReadDir(cfg.DataDir); err == nil && len(entries) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrNotEmpty, cfg.DataDir)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("reading the consensus data directory: %w", err)
	}
	if err := CheckSnapshotDatabase(ctx, cfg.Database); err != nil {
		return nil, err
	}
	found, err := readSnapshotKeys(cfg.Database, caCertKey, caKeyKey, crlKey, peerPrefix)
	if err != nil {
		return nil, err
	}
	peerCA, err := caFrom(found[caCertKey], found[caKeyKey])
	if err != nil {
		return nil, err
	}
	if _, err := parseCRL(peerCA.cert, found[crlKey]); err != nil {
		return nil, fmt.Errorf("%w: the snapshot's revocation list: %v", ErrDatabaseDamaged, err)
	}
	var lost []string
	for k := range found {
		if name, ok := strings.CutPrefix(k, peerPrefix); ok && name != cfg.Name {
			lost = append(lost, name)
		}
	}
	slices.Sort(lost)
	cert, err := peerCA.issuePeer(cfg.Name, addr, cfg.PeerKey.Public().(ed25519.PublicKey), time.Now())
	if err != nil {
		return nil, err
	}

	// Built beside, renamed into place once whole.
	staging := filepath.Clean(cfg.DataDir) + ".restoring"
	if err := os.RemoveAll(staging); err != nil {
		return nil, fmt.Errorf("removing what an interrupted restore left: %w", err)
	}
	l := layout(staging)
	if err := os.MkdirAll(l.pkiDir(), 0o700); err != nil {
		return nil, fmt.Errorf("creating the consensus data directory: %w", err)
	}
	defer os.RemoveAll(staging)
	if err := writePKI(l, peerCA.cert.Raw, cert.Raw, cfg.PeerKey, found[crlKey]); err != nil {
		return nil, err
	}
	token := make([]byte, 16)
	if _, err := rand.Read(token); err != nil {
		return nil, fmt.Errorf("generating cluster token: %w", err)
	}
	self := peerURL(addr)
	id := &identity{
		Name:                cfg.Name,
		PeerURL:             self,
		CAFingerprint:       fingerprint(peerCA.cert.Raw),
		InitialCluster:      cfg.Name + "=" + self,
		InitialClusterState: "new",
		InitialClusterToken: "polis-" + hex.EncodeToString(token),
		Recover:             &pendingRecovery{From: RecoveryFromBackup, Lost: lost},
	}
	err = snapshot.NewV3(logger.Named("etcd")).Restore(snapshot.RestoreConfig{
		SnapshotPath:        cfg.Database,
		Name:                cfg.Name,
		OutputDataDir:       l.etcdDir(),
		PeerURLs:            []string{self},
		InitialCluster:      id.InitialCluster,
		InitialClusterToken: id.InitialClusterToken,
		// The caller checked the hash (backup.Decrypt) and stripped it.
		SkipHashCheck: true,
		RevisionBump:  restoreRevisionBump,
		MarkCompacted: true,
	})
	if err != nil {
		return nil, fmt.Errorf("restoring etcd's data from the snapshot: %w", err)
	}
	if err := writeIdentity(l, id); err != nil {
		return nil, err
	}
	// Empty, or missing (checked above).
	if err := os.Remove(cfg.DataDir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("making room for the restored member: %w", err)
	}
	if err := os.Rename(staging, cfg.DataDir); err != nil {
		return nil, fmt.Errorf("moving the restored member into place: %w", err)
	}
	return lost, nil
}

// caFrom makes the peer CA of a snapshot's keys.
func caFrom(certDER, keyDER []byte) (*ca, error) {
	if certDER == nil || keyDER == nil {
		return nil, fmt.Errorf("%w: the snapshot holds no consensus peer CA (is it a Polis cluster's?)", ErrDatabaseDamaged)
	}
	cert, err := x509.ParseCertificate(certDER)
	if err != nil {
		return nil, fmt.Errorf("%w: the snapshot's peer CA certificate: %v", ErrDatabaseDamaged, err)
	}
	k, err := x509.ParsePKCS8PrivateKey(keyDER)
	key, ok := k.(ed25519.PrivateKey)
	if err != nil || !ok || !key.Public().(ed25519.PublicKey).Equal(cert.PublicKey) {
		return nil, fmt.Errorf("%w: the snapshot's peer CA key is not the key of its certificate", ErrDatabaseDamaged)
	}
	return &ca{cert: cert, key: key}, nil
}

// readSnapshotKeys reads, offline and read-only, the live values of the
// given keys (a key ending in "/" stands for every key under it) from an
// etcd database. Revisions are stored in order under etcd's "key"
// bucket, so the last one seen of a key is its live value, or its
// deletion.
func readSnapshotKeys(dbPath string, keys ...string) (map[string][]byte, error) {
	db, err := bolt.Open(dbPath, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return nil, fmt.Errorf("%w: opening the snapshot's database: %v", ErrDatabaseDamaged, err)
	}
	defer db.Close()
	want := func(k []byte) bool {
		for _, w := range keys {
			if string(k) == w || (strings.HasSuffix(w, "/") && bytes.HasPrefix(k, []byte(w))) {
				return true
			}
		}
		return false
	}
	out := map[string][]byte{}
	err = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("key"))
		if b == nil {
			return fmt.Errorf("%w: the snapshot's database has no key bucket: not an etcd database", ErrDatabaseDamaged)
		}
		return b.ForEach(func(rev, v []byte) error {
			var kv mvccpb.KeyValue
			if err := proto.Unmarshal(v, &kv); err != nil {
				return fmt.Errorf("%w: a key of the snapshot: %v", ErrDatabaseDamaged, err)
			}
			if !want(kv.Key) {
				return nil
			}
			// A deletion's revision ends in 't' (etcd's tombstone mark).
			if len(rev) > 17 && rev[17] == 't' {
				delete(out, string(kv.Key))
			} else {
				out[string(kv.Key)] = slices.Clone(kv.Value)
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
