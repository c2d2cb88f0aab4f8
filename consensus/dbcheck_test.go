package consensus

import (
	"crypto/tls"
	"errors"
	"os"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// A member whose database was truncated (a power cut, a full disk) is
// refused with an error naming the file, instead of etcd faulting on the
// mapped file and taking the whole process down with SIGBUS. Its peer port
// speaks TLS 1.3 only.
func TestDamagedDatabaseRefused(t *testing.T) {
	a := addrs(t, 1)
	cfg := bootstrapConfig(t, "one", a[0])
	svc := newService(t, cfg)
	stop := start(t, svc)
	waitVoter(t, svc)

	creds := peerCreds(t, svc)
	if err := peerGet(a[0], creds); err != nil {
		t.Fatalf("a TLS 1.3 peer connection: %v", err)
	}
	old := creds.Clone()
	old.MaxVersion = tls.VersionTLS12
	if err := peerGet(a[0], old); err == nil {
		t.Error("the peer port accepted TLS 1.2")
	}
	stop()

	db := layout(cfg.DataDir).dbFile()
	if err := checkDatabase(ctxT(t), db); err != nil {
		t.Fatalf("the intact database: %v", err)
	}
	// Cut the last page bbolt counts: bbolt preallocates, so the file's
	// own size says nothing about where its data ends.
	if err := os.Truncate(db, dbSize(t, db)-4096); err != nil {
		t.Fatal(err)
	}
	svc = newService(t, cfg)
	start(t, svc)
	stopped := waitStoppedWith(t, svc, ErrDatabaseDamaged)
	if msg := stopped.Err.Error(); !strings.Contains(msg, db) || !strings.Contains(msg, "truncated") {
		t.Errorf("the error does not say which file and what is wrong: %v", msg)
	}
}

func TestCheckDatabase(t *testing.T) {
	dir := t.TempDir()
	if err := checkDatabase(ctxT(t), dir+"/missing"); err != nil {
		t.Errorf("a missing database (etcd makes it): %v", err)
	}
	for name, content := range map[string][]byte{
		"empty":   nil,
		"garbage": []byte(strings.Repeat("not a bolt file ", 1024)),
	} {
		p := dir + "/" + name
		if err := os.WriteFile(p, content, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := checkDatabase(ctxT(t), p); !errors.Is(err, ErrDatabaseDamaged) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %v, want ErrDatabaseDamaged naming the file", name, err)
		}
	}
}

// dbSize is how many bytes of the bbolt file at path hold its pages, as
// bbolt says.
func dbSize(t *testing.T, path string) int64 {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var size int64
	if err := db.View(func(tx *bolt.Tx) error { size = tx.Size(); return nil }); err != nil {
		t.Fatal(err)
	}
	return size
}

// A database whose size is right but one of whose pages is damaged (a bit
// flipped in a bucket's root page) is refused too: bbolt's own check reads
// every page, where looking at the header alone would pass it.
func TestCorruptPageRefused(t *testing.T) {
	a := addrs(t, 1)
	cfg := bootstrapConfig(t, "one", a[0])
	svc := newService(t, cfg)
	stop := start(t, svc)
	waitVoter(t, svc)
	stop()

	db := layout(cfg.DataDir).dbFile()
	b, err := bolt.Open(db, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var root uint64
	var pageSize int
	err = b.View(func(tx *bolt.Tx) error {
		pageSize = tx.DB().Info().PageSize
		return tx.ForEach(func(name []byte, bk *bolt.Bucket) error {
			if root == 0 && bk.Root() != 0 {
				root = uint64(bk.Root())
			}
			return nil
		})
	})
	b.Close()
	if err != nil || root == 0 {
		t.Fatalf("finding a bucket's root page: %v (page %d)", err, root)
	}
	size := dbSize(t, db)
	// The page's first 8 bytes are its own id: make it claim to be another.
	f, err := os.OpenFile(db, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xff, 0xff, 0xff}, int64(root)*int64(pageSize)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if got := dbSize(t, db); got != size {
		t.Fatalf("the corruption changed the size bbolt sees: %d, was %d", got, size)
	}

	err = checkDatabase(ctxT(t), db)
	if !errors.Is(err, ErrDatabaseDamaged) || !strings.Contains(err.Error(), db) || !strings.Contains(err.Error(), "bbolt") {
		t.Fatalf("checking a database with a corrupt page: %v; want ErrDatabaseDamaged naming the file and what bbolt found", err)
	}
	svc = newService(t, cfg)
	start(t, svc)
	waitStoppedWith(t, svc, ErrDatabaseDamaged)
}
