package launch

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/ownerdir"
)

// A cluster restored from a backup (Options.RestoreBackup): the first node
// starts on fresh storage with polis-node --restore-backup, decrypting the
// backup with the owner key in the polisctl configuration it was taken
// with (a VM: the launcher decrypts it on the host and gives the machine
// the snapshot alone, restorevm.go), and becomes the single consensus
// member of the restored cluster;
// the owner takes ownership again through it (the CA is the one the
// configuration pins); the other nodes then register and join as in a new
// cluster. The old cluster's nodes stay in the records, as lost consensus
// members or nodes that no longer send heartbeats, for the operator to
// take out.

// restoreNext gives the process polis-node --restore-backup and
// --owner-key for its next start.
func (m *processMachine) restoreNext(n *Node, path string, _ ed25519.PrivateKey, keyPath string) (undo func(), err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	plain := m.args
	m.args = append(slices.Clone(plain), "--restore-backup", path, "--owner-key", keyPath)
	return func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		m.args = plain
	}, nil
}

// restoreOwnerKey reads the owner key of the configuration a restore uses.
func restoreOwnerKey(configDir string) (ed25519.PrivateKey, string, error) {
	path := filepath.Join(configDir, "key.der")
	der, err := os.ReadFile(path)
	if err != nil {
		return nil, "", fmt.Errorf("launch: restoring a backup needs the owner key of the cluster it was taken from, in the polisctl configuration given with --config: %w", err)
	}
	key, err := identity.ParsePrivateKey(der)
	if err != nil {
		return nil, "", fmt.Errorf("launch: the owner key %s: %w", path, err)
	}
	return key, path, nil
}

// checkRestore checks the options of a restore before anything starts.
func (o *Options) checkRestore() error {
	if o.RestoreBackup == "" {
		return nil
	}
	// Refused rather than ignored: the pod network is in the backup, and
	// the restored cluster keeps it (its workers keep their ranges).
	if o.PodRange.IsValid() || o.PodNodePrefixLength != 0 {
		return errors.New("launch: a restored cluster keeps the pod network of the cluster the backup was taken from: a pod range and node prefix length (PodRange, PodNodePrefixLength; --pod-range, --pod-node-prefix) are for a new cluster only; restore without them")
	}
	if o.ConfigDir == "" {
		return errors.New("launch: restoring a backup needs the polisctl configuration of the cluster it was taken from (its owner key decrypts the backup): give ConfigDir (--config)")
	}
	if _, err := os.Stat(o.RestoreBackup); err != nil {
		return fmt.Errorf("launch: the backup: %w", err)
	}
	return nil
}

// restore starts the first node from the backup and takes ownership of
// the restored cluster through it.
func (c *Cluster) restore(ctx context.Context) error {
	first := c.Nodes[0]
	key, keyPath, err := restoreOwnerKey(c.ConfigDir)
	if err != nil {
		return err
	}
	c.ownerKey = key
	backup, err := filepath.Abs(c.opts.RestoreBackup)
	if err != nil {
		return err
	}
	c.progress("%v: restoring the cluster from %s", first, backup)
	undo, err := first.m.restoreNext(first, backup, key, keyPath)
	if err != nil {
		return err
	}
	// Until the node serves: a VM that reboots meanwhile boots to restore
	// again (a node restored already starts as usual); a later start is
	// an ordinary one.
	defer undo()
	if err := c.StartNode(first); err != nil {
		return err
	}
	curator := netip.AddrPortFrom(first.Address, c.opts.CuratorPort)
	err = c.poll(ctx, first.String()+": curator serving", func(ctx context.Context) (bool, error) {
		if !first.Running() {
			return false, fmt.Errorf("launch: %v stopped: see %s", first, first.Log)
		}
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return ownershipTaken(ownerdir.TakeOwnership(actx, c.ConfigDir, []netip.AddrPort{curator}, key, func(fp string) bool {
			// The CA is the backup's, which only the owner key opened.
			c.progress("owner: the cluster CA's SHA-256 fingerprint is %s", fp)
			return true
		}))
	})
	if err != nil {
		return err
	}
	c.progress("%v: curator serving", first)
	c.progress("owner: took ownership of the restored cluster; polisctl configuration in %s", c.ConfigDir)
	if c.conn, err = ownerdir.Dial(c.ConfigDir); err != nil {
		return fmt.Errorf("launch: connecting as the owner: %w", err)
	}
	return c.poll(ctx, first.String()+": UP and healthy", func(ctx context.Context) (bool, error) {
		rec, err := c.nodeByAddress(ctx, first.Address)
		if err != nil || rec == nil || rec.Roles.GetConsensusMember() == nil {
			return false, nil
		}
		first.setID(rec.Id)
		return healthyUp(rec), nil
	})
}
