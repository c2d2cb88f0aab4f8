package consensus

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/polis-os/polis/supervisor/supervisortest"
)

// TestPeriodicSnapshots runs a Snapshotter beside a real member with a
// one-second interval: snapshots appear, each complete (its database
// matches etcd's hash and passes the bbolt check) and 0600, and no more
// than the policy's count are kept.
func TestPeriodicSnapshots(t *testing.T) {
	a := addrs(t, 1)
	svc := newService(t, bootstrapConfig(t, "one", a[0]))
	start(t, svc)
	st := waitVoter(t, svc)
	cli, err := st.ClientFor("test")
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()

	dir := filepath.Join(t.TempDir(), "snapshots")
	// A crash mid-snapshot left this behind; Run must remove it.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, snapshotTempPrefix+"123"+snapshotTempSuffix)
	if err := os.WriteFile(stale, []byte("half a snapshot"), 0o600); err != nil {
		t.Fatal(err)
	}

	const keep = 2
	var mu sync.Mutex
	seen := map[string]bool{}
	var latest []SnapshotFile
	changed := make(chan struct{}, 1)
	snap, err := NewSnapshotter(SnapshotterConfig{
		Status: svc.Status(),
		Dir:    dir,
		Policy: func(context.Context) (SnapshotPolicy, error) {
			return SnapshotPolicy{Interval: time.Second, Keep: keep}, nil
		},
		Publish: func(files []SnapshotFile) {
			mu.Lock()
			defer mu.Unlock()
			latest = files
			for _, f := range files {
				seen[f.Path] = true
			}
			select {
			case changed <- struct{}{}:
			default:
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	// exited says when Run has returned for good, so that the files are
	// checked once nothing writes them any more.
	exited := make(chan struct{})
	cancel := supervisortest.Harness(t, func(ctx context.Context) error {
		err := snap.Run(ctx)
		if ctx.Err() != nil {
			close(exited)
		}
		return err
	})
	defer cancel()

	// Write between snapshots so that they hold different revisions, until
	// keep+2 snapshots have been taken.
	ctx, stop := context.WithTimeout(context.Background(), waitTimeout)
	defer stop()
	for i := 0; ; i++ {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n >= keep+2 {
			break
		}
		if _, err := cli.Put(ctx, fmt.Sprintf("k%d", i), "v"); err != nil {
			t.Fatal(err)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatalf("only %d snapshots taken within %s", n, waitTimeout)
		}
	}

	cancel()
	select {
	case <-exited:
	case <-time.After(waitTimeout):
		t.Fatal("the Snapshotter did not stop")
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the unfinished snapshot left by a crash is still there (stat: %v)", err)
	}
	mu.Lock()
	published := latest
	mu.Unlock()
	files, err := ListSnapshots(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != keep || len(published) != keep {
		t.Fatalf("%d snapshots on disk, %d published, want %d (pruned to the count)", len(files), len(published), keep)
	}
	if files[0].Time.Before(files[1].Time) {
		t.Errorf("ListSnapshots not newest first: %v", files)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, _, ok := parseSnapshotName(e.Name()); !ok && !strings.HasPrefix(e.Name(), snapshotTempPrefix) {
			t.Errorf("unexpected file %s in the snapshot directory", e.Name())
		}
	}
	if info, err := os.Stat(dir); err != nil || info.Mode().Perm() != 0o700 {
		t.Errorf("snapshot directory mode = %v (%v), want 0700", info.Mode().Perm(), err)
	}
	for _, f := range files {
		info, err := os.Stat(f.Path)
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm() != 0o600 {
			t.Errorf("%s mode = %v, want 0600: it holds the CA's keys", f.Path, info.Mode().Perm())
		}
		if info.Size() != f.Size || f.Revision <= 0 {
			t.Errorf("%s: listed as %+v, size on disk %d", f.Path, f, info.Size())
		}
		data, err := os.ReadFile(f.Path)
		if err != nil {
			t.Fatal(err)
		}
		db, sum := data[:len(data)-sha256.Size], data[len(data)-sha256.Size:]
		if h := sha256.Sum256(db); !bytes.Equal(h[:], sum) {
			t.Errorf("%s does not end with its database's SHA-256", f.Path)
		}
		dbPath := filepath.Join(t.TempDir(), "db")
		if err := os.WriteFile(dbPath, db, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := CheckSnapshotDatabase(ctxT(t), dbPath); err != nil {
			t.Errorf("%s: %v", f.Path, err)
		}
	}
}

// TestWriteSnapshotRefusesDamage feeds writeSnapshot streams that are not
// a database followed by its hash: none is kept, under any name.
func TestWriteSnapshotRefusesDamage(t *testing.T) {
	db := bytes.Repeat([]byte("database page "), 1000)
	sum := sha256.Sum256(db)
	good := append(append([]byte(nil), db...), sum[:]...)
	flipped := append([]byte(nil), good...)
	flipped[100] ^= 1
	for name, stream := range map[string][]byte{
		"truncated":   good[:len(good)-10],
		"flipped bit": flipped,
		"hash only":   sum[:],
		"empty":       nil,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if _, err := writeSnapshot(dir, time.Now(), 7, bytes.NewReader(stream)); err == nil {
				t.Fatal("writeSnapshot accepted a damaged stream")
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("left %v behind", entries)
			}
		})
	}
	dir := t.TempDir()
	f, err := writeSnapshot(dir, time.Date(2026, 11, 25, 14, 0, 0, 5, time.UTC), 7, bytes.NewReader(good))
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "snapshot-20261125T140000Z-r7.db"); f.Path != want || f.Size != int64(len(good)) {
		t.Errorf("wrote %+v, want %s of %d bytes", f, want, len(good))
	}
}

func TestSnapshotNames(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	name := snapshotName(at, 42)
	got, rev, ok := parseSnapshotName(name)
	if !ok || !got.Equal(at) || rev != 42 {
		t.Errorf("parseSnapshotName(%q) = %v, %d, %v", name, got, rev, ok)
	}
	for _, bad := range []string{"snapshot-x-r1.db", "snapshot-20260102T030405Z-r-1.db", "snapshot-20260102T030405Z.db", ".snapshot-1.tmp", "db"} {
		if _, _, ok := parseSnapshotName(bad); ok {
			t.Errorf("parseSnapshotName(%q) accepted", bad)
		}
	}
}
