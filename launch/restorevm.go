package launch

import (
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/polis-os/polis/curator/backup"
	"github.com/polis-os/polis/node/pid1"
)

// restoreNext readies n's VM to restore the cluster from the backup at its
// next boot. The backup is decrypted with the owner key here, on
// the host, into etcd's snapshot format in n's directory (0600, beside
// the disks that will hold the same data), which qemu gives the guest
// through fw_cfg, with the agent's --restore-snapshot on its kernel
// command line (pid1.RestoreSnapshotPath): the owner key never enters
// the VM. undo removes the snapshot from the host and makes later boots
// ordinary ones.
func (m *vmMachine) restoreNext(n *Node, backupPath string, key ed25519.PrivateKey, _ string) (undo func(), err error) {
	snap := filepath.Join(n.Dir, "restore-snapshot.db")
	if err := decryptSnapshot(backupPath, key, snap); err != nil {
		return nil, err
	}
	n.mu.Lock()
	plain := m.cfg
	m.cfg.RestoreSnapshot = snap
	m.cfg.AgentFlags = append(slices.Clone(m.cfg.AgentFlags), "restore-snapshot="+pid1.RestoreSnapshotPath)
	n.mu.Unlock()
	return func() {
		n.mu.Lock()
		m.cfg = plain
		n.mu.Unlock()
		if err := os.Remove(snap); err != nil {
			n.report("%v: removing the decrypted snapshot: %v", n, err)
		}
	}, nil
}

// decryptSnapshot writes the snapshot of the backup at path, decrypted
// with key and checked, to snap in etcd's snapshot format (the database,
// then its SHA-256), 0600. Nothing is left at snap on failure.
func decryptSnapshot(path string, key ed25519.PrivateKey, snap string) (err error) {
	in, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("launch: the backup: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(snap, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("launch: making room for the decrypted snapshot: %w", err)
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(snap)
		}
	}()
	h := sha256.New()
	if _, err := backup.Decrypt(in, key, io.MultiWriter(out, h)); err != nil {
		if errors.Is(err, backup.ErrWrongKey) {
			return fmt.Errorf("launch: restoring from %s: %w: give the polisctl configuration of the cluster it was taken from (--config)", path, err)
		}
		return fmt.Errorf("launch: restoring from %s: %w", path, err)
	}
	if _, err := out.Write(h.Sum(nil)); err != nil {
		return fmt.Errorf("launch: writing the decrypted snapshot: %w", err)
	}
	return out.Sync()
}
