package polisctl

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/consensus"
	"github.com/polis-os/polis/curator/backup"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/internal/atomicfile"
	"github.com/polis-os/polis/ownerdir"
)

// backupCmd is cluster backup: take a backup, or inspect one.
func (c *cli) backupCmd() *cobra.Command {
	var (
		inspect bool
		keyPath string
	)
	cmd := &cobra.Command{
		Use:   "backup FILE",
		Short: "Save a backup of the whole cluster state, encrypted to the owner key, or inspect one",
		Long: `backup asks a curator for a consistent snapshot of the cluster's etcd (every
node, role, label, the CA and its key, the register ticket) and writes it
to FILE, encrypted to the owner key with age (an ssh-ed25519 recipient of
the owner's ed25519 key): only the owner key opens it. The snapshot's
SHA-256 is checked before FILE is written, and FILE appears whole or not at
all (written beside it, then renamed), readable by its owner only.

With --inspect, backup reads FILE instead, offline: it decrypts it with the
owner key in the configuration directory (or --owner-key), checks it, and
says when it was taken, from which node, at which etcd revision, and how
many nodes it holds. A damaged or truncated file, or one encrypted to
another key, is refused with an error saying so.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if inspect {
				return c.inspectBackup(cmd.Context(), cmd.OutOrStdout(), args[0], keyPath)
			}
			if keyPath != "" {
				return errors.New("--owner-key is for --inspect: a backup is taken with the owner credentials in the configuration directory")
			}
			return c.withSession(func(s *session) error { return takeBackup(cmd, s, args[0]) })
		},
	}
	cmd.Flags().BoolVar(&inspect, "inspect", false, "read FILE, offline, and say what it holds")
	cmd.Flags().StringVar(&keyPath, "owner-key", "", "with --inspect: the owner key to decrypt with (PKCS#8, DER or PEM) instead of the configuration's")
	return cmd
}

// ownerPrivateKey reads the owner key saved in the configuration
// directory.
func ownerPrivateKey(dir string) (ed25519.PrivateKey, string, error) {
	cfg, err := ownerdir.Open(dir)
	if err != nil {
		return nil, "", err
	}
	der, err := cfg.Key.Read()
	if err != nil {
		return nil, "", fmt.Errorf("reading the owner key: %w; run polisctl take-ownership first", err)
	}
	key, err := identity.ParsePrivateKey(der)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", cfg.Key.Path, err)
	}
	return key, cfg.Key.Path, nil
}

func takeBackup(cmd *cobra.Command, s *session, path string) error {
	key, _, err := ownerPrivateKey(s.dir)
	if err != nil {
		return err
	}
	var info *cpb.BackupInfo
	var size int64
	var taking error // the backup's own failure, as against the file's
	// 0600: the file holds the CA key (encrypted).
	err = atomicfile.Write(path, "", 0o600, func(w io.Writer) error {
		taking = s.call(cmd.Context(), "taking a backup", func(ctx context.Context) error {
			stream, err := s.mgmt.BackupCluster(ctx, &cpb.BackupClusterRequest{})
			if err != nil {
				return err
			}
			first, err := stream.Recv()
			if err != nil {
				return err
			}
			info = first.GetInfo()
			if info == nil {
				return errors.New("the curator's first message carries no description of the snapshot")
			}
			r := &streamReader{recv: stream.Recv, buf: first.Chunk}
			counted := &countingWriter{w: w}
			err = backup.Write(counted, key.Public().(ed25519.PublicKey), backup.Info{
				TakenAt:     info.TakenAt.AsTime(),
				NodeID:      info.NodeId,
				Revision:    info.Revision,
				EtcdVersion: info.EtcdVersion,
			}, r)
			size = counted.n
			return err
		})
		return taking
	})
	if err != nil {
		if taking != nil {
			return err
		}
		return fmt.Errorf("creating the backup file: %w", err)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "Backup written to %s: %d bytes, encrypted to the owner key; taken at %s from %s (revision %d)\n",
		path, size, info.TakenAt.AsTime().UTC().Format(time.RFC3339), info.NodeId, info.Revision)
	return nil
}

// streamReader reads the snapshot out of a BackupCluster stream.
type streamReader struct {
	recv func() (*cpb.BackupClusterResponse, error)
	buf  []byte
}

func (r *streamReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		msg, err := r.recv()
		if err != nil {
			return 0, err
		}
		r.buf = msg.Chunk
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// inspectBackup decrypts a backup into a private temporary file, checks
// it and describes it. It reads only: the backup is left as it is.
func (c *cli) inspectBackup(ctx context.Context, w io.Writer, path, keyPath string) error {
	var (
		key     ed25519.PrivateKey
		keyFrom string
		err     error
	)
	if keyPath != "" {
		key, err = readOwnerKey(keyPath)
		keyFrom = keyPath
	} else {
		key, keyFrom, err = ownerPrivateKey(c.configDir)
	}
	if err != nil {
		return err
	}
	info, sum, err := readBackup(ctx, path, key)
	if errors.Is(err, backup.ErrWrongKey) {
		return fmt.Errorf("%s: %w (%s); give the owner key it was taken with: --owner-key FILE", path, err, keyFrom)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "Backup:        %s\n", path)
	fmt.Fprintf(w, "Taken at:      %s\n", info.TakenAt.UTC().Format(time.RFC3339))
	fmt.Fprintf(w, "Taken from:    %s (etcd %s)\n", info.NodeID, info.EtcdVersion)
	fmt.Fprintf(w, "Revision:      %d\n", sum.Revision)
	fmt.Fprintf(w, "Nodes:         %d\n", sum.Nodes)
	fmt.Fprintf(w, "Keys:          %d\n", sum.Keys)
	fmt.Fprintf(w, "Database size: %d bytes (SHA-256 checked)\n", sum.Size)
	return nil
}

// readBackup decrypts the backup at path with the owner key, checks it and
// summarises its snapshot. Errors wrap backup.ErrWrongKey or
// backup.ErrDamaged where those apply.
func readBackup(ctx context.Context, path string, key ed25519.PrivateKey) (*backup.Info, *backup.Summary, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the backup: %w", err)
	}
	defer f.Close()
	db, err := os.CreateTemp("", "polis-backup-*.db")
	if err != nil {
		return nil, nil, fmt.Errorf("making room for the decrypted snapshot: %w", err)
	}
	defer os.Remove(db.Name())
	info, err := backup.Decrypt(f, key, db)
	if cerr := db.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("writing the decrypted snapshot: %w", cerr)
	}
	if err != nil {
		if errors.Is(err, backup.ErrWrongKey) {
			return nil, nil, err
		}
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	// The file passed age's authentication and its own hash, but anyone
	// with the owner's public key can make one: check it with bbolt in a
	// child before reading it here.
	if err := consensus.CheckSnapshotDatabase(ctx, db.Name()); err != nil {
		return nil, nil, fmt.Errorf("%s: %w: %w", path, backup.ErrDamaged, err)
	}
	sum, err := backup.Summarize(db.Name())
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return info, sum, nil
}
