package node

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/polis-os/polis/consensus"
	"github.com/polis-os/polis/curator/backup"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/localstorage"
	"github.com/polis-os/polis/roleserve"
)

// Restore onto fresh storage: a new machine becomes the single consensus
// member of a cluster brought back from a backup (or from a member's
// automatic snapshot). The backup holds the cluster's whole state but no
// node's key (node keys never leave their nodes), so the machine is a new
// node: it makes its key, its consensus member is made from the
// snapshot's database (consensus.PrepareRestore), and its curator, once
// etcd serves, adds it to the restored state as the first node of a new
// cluster is added at bootstrap (curator.BootstrapParams.Restored), UP and
// a consensus member, with a certificate from the CA in the backup. The
// old consensus members are dropped as after a recovery from a survivor.
//
// The backup is decrypted in memory with the owner key into a private
// file under the node's data directory, which holds the consensus data
// (and so the same secrets) anyway, and is removed once the member is
// made: the owner key is read, never stored. A mark in the node's private
// directory (restoreMark) says how far the restore went: "preparing" while
// the member is made (an interrupted preparation is started over),
// "prepared" once it is whole, so that a crash before the node has
// enrolled finishes the restore on the next start, and a node started
// again with the same command after the restore starts as usual.

// RestoreSource says what Config.Restore restores from.
type RestoreSource struct {
	// Backup is a backup file (polisctl cluster backup), decrypted with
	// OwnerKey. Exactly one of Backup and Snapshot is set.
	Backup   string
	OwnerKey ed25519.PrivateKey
	// Snapshot is one of a consensus member's automatic snapshots
	// (etcd's snapshot format, data/consensus-snapshots/ of its storage).
	Snapshot string
}

// ErrStorageInUse is returned by PrepareRestore for storage that holds a
// node already: a restore needs fresh storage.
var ErrStorageInUse = errors.New("the storage holds a node already: a restore needs fresh storage")

// restoreMark is what restoreMarkFile holds.
type restoreMark struct {
	// State is "preparing" or "prepared".
	State string `json:"state"`
	// From names what was restored: the backup file or snapshot.
	From string `json:"from"`
	// Info is the backup's description (nil for a snapshot).
	Info *backup.Info `json:"info,omitempty"`
}

const (
	restorePreparing = "preparing"
	restorePrepared  = "prepared"
)

func (n *Node) restoreMarkFile() localstorage.File {
	return localstorage.File{Path: filepath.Join(n.root.Data.Node.Path, "restore.json"), Secret: true,
		Advice: "the node was being restored from a backup: wipe its storage and restore again"}
}

// readRestoreMark returns the storage's restore mark, nil if it has none.
func (n *Node) readRestoreMark() (*restoreMark, error) {
	b, err := n.restoreMarkFile().Read()
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var m restoreMark
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", n.restoreMarkFile().Path, err)
	}
	return &m, nil
}

func (n *Node) writeRestoreMark(m *restoreMark) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return n.restoreMarkFile().Write(b)
}

// restored reports whether the storage holds a restore prepared and not
// yet enrolled through: Run then takes the restore's way in.
func (n *Node) restored() (bool, error) {
	m, err := n.readRestoreMark()
	if err != nil || m == nil {
		return false, err
	}
	if m.State != restorePrepared {
		return false, fmt.Errorf("a restore of this node's storage was interrupted while it was being prepared; start the node with the same --restore-backup (or --restore-snapshot) again")
	}
	return true, nil
}

// restorePending says whether Run takes the restore's way in: a restore
// was prepared on this storage (the node is not enrolled yet, which the
// caller checks).
func (n *Node) restorePending() bool {
	ok, _ := n.restored()
	return ok
}

// PrepareRestore carries out Config.Restore: it makes this node, on fresh
// storage, the consensus member of the restored cluster (see above). It
// fails, leaving the storage as it was, for storage that holds a node
// (ErrStorageInUse), a backup for another owner key
// (backup.ErrWrongKey), and a backup or snapshot that is damaged or cut
// short (backup.ErrDamaged). polis-node calls it before Run, so that a
// refusal ends the program with its reason; Run calls it if nobody did.
func (n *Node) PrepareRestore(ctx context.Context, logger *zap.Logger) error {
	src := n.cfg.Restore
	if src == nil || n.restorePrepared {
		return nil
	}
	mark, err := n.readRestoreMark()
	if err != nil {
		return fmt.Errorf("restoring: %w", err)
	}
	switch {
	case mark != nil && mark.State == restorePrepared:
		logger.Info("asked to restore, but this node's storage was restored already: starting as usual", zap.String("from", mark.From))
		n.restorePrepared = true
		return nil
	case mark != nil:
		// Interrupted while the member was being made: start over.
		logger.Info("a restore of this storage was interrupted; starting it over")
		if err := n.undoRestore(); err != nil {
			return err
		}
	default:
		if what, err := n.holdsNode(); err != nil {
			return err
		} else if what != "" {
			return fmt.Errorf("%w: %s holds %s; give the node a new, empty --storage directory", ErrStorageInUse, n.root.Dir, what)
		}
	}
	if err := n.root.Create(); err != nil {
		return err
	}
	from := src.Backup
	if from == "" {
		from = src.Snapshot
	}
	abs, err := filepath.Abs(from)
	if err == nil {
		from = abs
	}
	start := time.Now()
	// The decrypted database lives only while the member is made.
	db := filepath.Join(n.root.Data.Path, "restore.db")
	defer os.Remove(db)
	info, err := n.readRestoreSource(db)
	if err != nil {
		return err
	}
	if err := n.writeRestoreMark(&restoreMark{State: restorePreparing, From: from, Info: info}); err != nil {
		return err
	}
	key, err := n.nodeKey()
	if err != nil {
		return err
	}
	port := n.cfg.ConsensusPort
	if port == 0 {
		port = roleserve.DefaultConsensusPort
	}
	id := identity.NodeID(key.Public().(ed25519.PublicKey))
	lost, err := consensus.PrepareRestore(ctx, consensus.RestoreConfig{
		DataDir:     n.root.Data.Etcd.Path,
		Name:        id,
		PeerAddress: netip.AddrPortFrom(n.cfg.Address, port).String(),
		PeerKey:     key,
		Database:    db,
	}, logger)
	if err != nil {
		// Nothing of the cluster is in the storage: leave it as it was.
		if uerr := n.undoRestore(); uerr != nil {
			logger.Warn("cleaning up after a failed restore", zap.Error(uerr))
		}
		return fmt.Errorf("restoring from %s: %w", from, err)
	}
	if err := n.writeRestoreMark(&restoreMark{State: restorePrepared, From: from, Info: info}); err != nil {
		return err
	}
	fields := []zap.Field{zap.String("node", id), zap.String("from", from), zap.Strings("lost", lost), zap.Duration("took", time.Since(start))}
	if info != nil {
		fields = append(fields, zap.Time("backup_taken_at", info.TakenAt), zap.String("backup_taken_from", info.NodeID))
	}
	logger.Warn("restored the cluster's state onto this node: it starts as the single consensus member of the restored cluster", fields...)
	n.restorePrepared = true
	return nil
}

// readRestoreSource writes the database of the backup or snapshot to db,
// checked, and returns the backup's description.
func (n *Node) readRestoreSource(db string) (*backup.Info, error) {
	src := n.cfg.Restore
	path := src.Backup
	if path == "" {
		path = src.Snapshot
	}
	in, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("restoring: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(db, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("restoring: making room for the snapshot: %w", err)
	}
	var info *backup.Info
	if src.Backup != "" {
		info, err = backup.Decrypt(in, src.OwnerKey, out)
		if errors.Is(err, backup.ErrWrongKey) {
			err = fmt.Errorf("%w: give the owner key of the cluster it was taken from (--owner-key)", err)
		}
	} else {
		err = backup.ReadSnapshot(in, out)
	}
	if cerr := out.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("restoring from %s: %w", path, err)
	}
	return info, nil
}

// holdsNode says what in the storage belongs to a node already, "" for
// storage fit for a restore.
func (n *Node) holdsNode() (string, error) {
	for _, f := range []localstorage.File{n.root.ESP.SealedConfiguration, n.root.ESP.NodeParameters, n.root.Data.Node.Key, n.root.Data.Node.Certificate} {
		if _, err := os.Stat(f.Path); err == nil {
			return "a node's " + filepath.Base(f.Path), nil
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
	}
	if entries, err := os.ReadDir(n.root.Data.Etcd.Path); err == nil && len(entries) > 0 {
		return "consensus data (" + n.root.Data.Etcd.Path + ")", nil
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	return "", nil
}

// undoRestore removes what a restore that did not finish wrote.
func (n *Node) undoRestore() error {
	if err := os.RemoveAll(n.root.Data.Etcd.Path); err != nil {
		return fmt.Errorf("undoing an unfinished restore: %w", err)
	}
	if err := n.root.Data.Node.Key.Remove(); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("undoing an unfinished restore: %w", err)
	}
	if err := n.restoreMarkFile().Remove(); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("undoing an unfinished restore: %w", err)
	}
	return nil
}
