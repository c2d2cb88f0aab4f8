package consensus

import (
	"crypto/tls"
	"errors"
	"os"
	"strings"
	"testing"
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
	if err := checkDatabase(db); err != nil {
		t.Fatalf("the intact database: %v", err)
	}
	// Cut the last page the header counts: bbolt preallocates, so the
	// file's own size says nothing about where its data ends.
	head := make([]byte, boltPageHeader+boltMetaSize)
	f, err := os.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.ReadAt(head, 0)
	f.Close()
	m := parseBoltMeta(head)
	if err != nil || m == nil {
		t.Fatalf("reading the database's first meta page: %v", err)
	}
	if err := os.Truncate(db, int64(m.pgid-1)*int64(m.pageSize)); err != nil {
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
	if err := checkDatabase(dir + "/missing"); err != nil {
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
		if err := checkDatabase(p); !errors.Is(err, ErrDatabaseDamaged) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %v, want ErrDatabaseDamaged naming the file", name, err)
		}
	}
}
