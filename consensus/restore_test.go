package consensus

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"go.uber.org/zap/zaptest"
)

// TestPrepareRestore: a snapshot of a three-member cluster, restored onto
// a fresh directory, starts as the single member of a restored cluster
// with every key; the old members are the lost ones, and their
// certificates can be revoked. A damaged database and a directory that
// holds something are refused, leaving nothing behind.
func TestPrepareRestore(t *testing.T) {
	a := addrs(t, 4)
	fc := formCluster(t, a[:2])
	cfg, st1 := fc.cfg, fc.st1
	put(t, st1, "kept", "in the snapshot")
	db := snapshotDatabase(t, st1)
	fc.joiners[0].stop()
	fc.stop()

	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "etcd")
	rcfg := RestoreConfig{DataDir: dir, Name: "four", PeerAddress: a[3], PeerKey: key, Database: db}

	// Refused: a damaged database (cut short), a directory in use.
	whole, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(t.TempDir(), "cut.db")
	if err := os.WriteFile(cut, whole[:len(whole)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	bad := rcfg
	bad.Database = cut
	if _, err := PrepareRestore(ctxT(t), bad, zaptest.NewLogger(t)); !errors.Is(err, ErrDatabaseDamaged) {
		t.Errorf("PrepareRestore of a database cut short: %v; want ErrDatabaseDamaged", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused restore left %s: %v", dir, err)
	}
	used := rcfg
	used.DataDir = cfg.DataDir
	if _, err := PrepareRestore(ctxT(t), used, zaptest.NewLogger(t)); !errors.Is(err, ErrNotEmpty) {
		t.Errorf("PrepareRestore onto a member's directory: %v; want ErrNotEmpty", err)
	}

	lost, err := PrepareRestore(ctxT(t), rcfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("PrepareRestore: %v", err)
	}
	if !slices.Equal(lost, []string{"one", "two"}) {
		t.Errorf("lost = %v, want [one two]", lost)
	}
	four := newService(t, Config{Name: "four", DataDir: dir, PeerAddress: a[3], PeerKey: key})
	start(t, four)
	st := waitVoter(t, four)
	if st.ClusterID == st1.ClusterID {
		t.Errorf("the restored cluster kept etcd's cluster ID %x: it is a new etcd cluster", st.ClusterID)
	}
	members, err := st.Members(ctxT(t))
	if err != nil || len(members) != 1 || members[0].Name != "four" {
		t.Errorf("members after the restore = %+v, %v; want four alone", members, err)
	}
	c, err := st.ClientFor("test")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	resp, err := c.Get(ctxT(t), "kept")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "in the snapshot" {
		t.Fatalf("the key in the snapshot: %v, %v", resp, err)
	}
	if resp.Header.Revision < restoreRevisionBump {
		t.Errorf("revision %d after the restore: want it bumped past %d", resp.Header.Revision, restoreRevisionBump)
	}
	rec, err := st.Recovery(ctxT(t))
	if err != nil || rec == nil || rec.Member != "four" || rec.From != RecoveryFromBackup || !slices.Equal(rec.Lost, []string{"one", "two"}) {
		t.Errorf("Recovery() = %+v, %v", rec, err)
	}
	// The lost members' certificates are revoked as after any recovery;
	// the restored member's own is known to etcd.
	for _, name := range lost {
		if err := st.Remove(ctxT(t), name); err != nil {
			t.Errorf("Remove(%s): %v", name, err)
		}
	}
	m, _ := st.running()
	if cert, err := m.issuedCert(ctxT(t), "four"); err != nil || cert == nil {
		t.Errorf("the restored member's certificate in etcd: %v, %v", cert, err)
	}
}

// snapshotDatabase writes a snapshot of st's member as a database file
// without etcd's trailing hash (as backup.Decrypt writes it).
func snapshotDatabase(t *testing.T, st *Status) string {
	t.Helper()
	snap, err := st.Snapshot(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Data.Close()
	b, err := io.ReadAll(snap.Data)
	if err != nil {
		t.Fatal(err)
	}
	db, sum := b[:len(b)-sha256.Size], b[len(b)-sha256.Size:]
	if h := sha256.Sum256(db); string(h[:]) != string(sum) {
		t.Fatal("the snapshot's hash does not match")
	}
	p := filepath.Join(t.TempDir(), "snapshot.db")
	if err := os.WriteFile(p, db, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
