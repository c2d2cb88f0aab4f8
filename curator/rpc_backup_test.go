package curator

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/curator/backup"
)

// readBackupStream collects a BackupCluster stream: its info and the
// snapshot.
func readBackupStream(t *testing.T, stream interface {
	Recv() (*cpb.BackupClusterResponse, error)
}) (*cpb.BackupInfo, []byte, error) {
	t.Helper()
	var info *cpb.BackupInfo
	var data bytes.Buffer
	for i := 0; ; i++ {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return info, data.Bytes(), nil
		}
		if err != nil {
			return nil, nil, err
		}
		if i == 0 {
			info = msg.Info
		} else if msg.Info != nil {
			t.Errorf("message %d carries info too", i)
		}
		if len(msg.Chunk) > backupChunk {
			t.Errorf("message %d carries %d bytes, more than %d", i, len(msg.Chunk), backupChunk)
		}
		data.Write(msg.Chunk)
	}
}

// TestBackupCluster takes a backup as the owner and reads it back: the
// snapshot holds the node written before the call, checks out against its
// hash, and opens only with the owner key.
func TestBackupCluster(t *testing.T) {
	c := newTestCluster(t)
	mgmt := cpb.NewManagementServiceClient(c.asOwner())
	ctx := ctxT(t)
	if _, err := mgmt.UpdateNodeLabels(ctx, &cpb.UpdateNodeLabelsRequest{NodeId: c.status.NodeID, Set: map[string]string{"backup": "before"}}); err != nil {
		t.Fatal(err)
	}
	stream, err := mgmt.BackupCluster(ctx, &cpb.BackupClusterRequest{})
	if err != nil {
		t.Fatal(err)
	}
	info, snap, err := readBackupStream(t, stream)
	if err != nil {
		t.Fatalf("BackupCluster: %v", err)
	}
	if info.GetNodeId() != c.status.NodeID || info.GetRevision() <= 0 || info.GetTakenAt() == nil || info.GetEtcdVersion() == "" {
		t.Errorf("info = %v; want this curator's node, a revision, a time and a version", info)
	}

	var file bytes.Buffer
	owner := c.ownerKey.Public().(ed25519.PublicKey)
	if err := backup.Write(&file, owner, backup.Info{NodeID: info.NodeId, Revision: info.Revision}, bytes.NewReader(snap)); err != nil {
		t.Fatalf("writing the backup: %v", err)
	}
	db := filepath.Join(t.TempDir(), "db")
	f, err := os.Create(db)
	if err != nil {
		t.Fatal(err)
	}
	got, err := backup.Decrypt(bytes.NewReader(file.Bytes()), c.ownerKey, f)
	f.Close()
	if err != nil {
		t.Fatalf("decrypting the backup: %v", err)
	}
	if got.Revision != info.Revision {
		t.Errorf("decrypted revision %d, want %d", got.Revision, info.Revision)
	}
	sum, err := backup.Summarize(db)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Nodes != 1 || sum.Revision < info.Revision {
		t.Errorf("summary %+v; want 1 node at revision >= %d", sum, info.Revision)
	}

	// Not the owner key: refused, and nothing written.
	var out bytes.Buffer
	if _, err := backup.Decrypt(bytes.NewReader(file.Bytes()), mustKey(t), &out); !errors.Is(err, backup.ErrWrongKey) || out.Len() != 0 {
		t.Errorf("decrypting with another key: %v, %d bytes out; want ErrWrongKey and nothing", err, out.Len())
	}
	// A snapshot cut short is never written as a backup.
	if err := backup.Write(io.Discard, owner, backup.Info{}, bytes.NewReader(snap[:len(snap)-100])); !errors.Is(err, backup.ErrDamaged) {
		t.Errorf("writing a truncated snapshot: %v; want ErrDamaged", err)
	}
}

// TestBackupClusterRefusesNodes: a node certificate, even the UP first
// node's, does not take backups (the matrix checks every caller kind; this
// names the error).
func TestBackupClusterRefusesNodes(t *testing.T) {
	c := newTestCluster(t)
	stream, err := cpb.NewManagementServiceClient(c.asFirstNode()).BackupCluster(ctxT(t), &cpb.BackupClusterRequest{})
	if err == nil {
		_, _, err = readBackupStream(t, stream)
	}
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("BackupCluster as a node: %v; want PERMISSION_DENIED", err)
	}
}

// BenchmarkBackupCluster measures what polisctl cluster backup costs with
// 1,000 nodes' records: the curator's snapshot streamed over mTLS, its
// hash checked and the whole encrypted to the owner key (written nowhere:
// the disk is the workstation's). backup-bytes is the size of the file it
// would write.
func BenchmarkBackupCluster(b *testing.B) {
	c := newTestCluster(b)
	c.putRandomNodes(b, 1000)
	mgmt := cpb.NewManagementServiceClient(c.asOwner())
	owner := c.ownerKey.Public().(ed25519.PublicKey)
	var size int64
	b.ResetTimer()
	for b.Loop() {
		stream, err := mgmt.BackupCluster(ctxT(b), &cpb.BackupClusterRequest{})
		if err != nil {
			b.Fatal(err)
		}
		pr, pw := io.Pipe()
		go func() {
			for {
				msg, err := stream.Recv()
				if err != nil {
					if errors.Is(err, io.EOF) {
						err = nil
					}
					pw.CloseWithError(err)
					return
				}
				if _, err := pw.Write(msg.Chunk); err != nil {
					return
				}
			}
		}()
		w := &countWriter{}
		if err := backup.Write(w, owner, backup.Info{}, pr); err != nil {
			b.Fatal(err)
		}
		size = w.n
	}
	b.ReportMetric(float64(size), "backup-bytes")
}

type countWriter struct{ n int64 }

func (w *countWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }
