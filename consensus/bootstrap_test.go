package consensus

import (
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"
)

func bootstrapConfig(t testing.TB, name, addr string) Config {
	return Config{
		Name:        name,
		DataDir:     t.TempDir(),
		PeerAddress: addr,
		Bootstrap:   true,
	}
}

func TestBootstrap(t *testing.T) {
	a := addrs(t, 1)
	cfg := bootstrapConfig(t, "one", a[0])
	svc := newService(t, cfg)
	start(t, svc)
	st := waitVoter(t, svc)
	if !st.Leader || st.LeaderID != st.MemberID || st.MemberID == 0 || st.ClusterID == 0 {
		t.Errorf("single member status = %+v, want leader with IDs", st)
	}

	cli, err := st.ClientFor("test")
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(ctxT(t), "k", "v"); err != nil {
		t.Fatalf("Put: %v", err)
	}

	l := layout(svc.cfg.DataDir)
	if _, err := os.Stat(l.caKeyFile()); !os.IsNotExist(err) {
		t.Errorf("CA key still on disk after bootstrap (stat: %v)", err)
	}
	for _, f := range []string{l.peerKeyFile(), l.identityFile()} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", filepath.Base(f), fi.Mode().Perm())
		}
	}
	fi, err := os.Stat(svc.cfg.ClientSocket)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("client socket has mode %v, want 0600", fi.Mode().Perm())
	}
	// The CA key is in the internal namespace, where any voter can use it.
	if _, err := loadCA(ctxT(t), st.m.cli); err != nil {
		t.Errorf("loading CA from etcd: %v", err)
	}
}

func TestRestart(t *testing.T) {
	a := addrs(t, 1)
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	cfg := bootstrapConfig(t, "one", a[0])
	cfg.PeerKey = key

	svc := newService(t, cfg)
	stop := start(t, svc)
	first := waitVoter(t, svc)
	cli, err := first.ClientFor("test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctxT(t), "k", "before restart"); err != nil {
		t.Fatal(err)
	}
	cli.Close()
	stop()

	// Same configuration, Bootstrap still set: the node agent passes the
	// same flags on every boot, and the member must restart, not
	// bootstrap a second cluster.
	svc = newService(t, cfg)
	start(t, svc)
	second := waitVoter(t, svc)
	if second.ClusterID != first.ClusterID || second.MemberID != first.MemberID {
		t.Errorf("after restart: cluster %x member %x, want cluster %x member %x",
			second.ClusterID, second.MemberID, first.ClusterID, first.MemberID)
	}
	cli, err = second.ClientFor("test")
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	resp, err := cli.Get(ctxT(t), "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "before restart" {
		t.Errorf("after restart, k = %v, want %q", resp.Kvs, "before restart")
	}
}
