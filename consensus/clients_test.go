package consensus

import (
	"context"
	"errors"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

func TestNamespaces(t *testing.T) {
	a := addrs(t, 1)
	svc := newService(t, bootstrapConfig(t, "one", a[0]))
	start(t, svc)
	st := waitVoter(t, svc)

	for _, bad := range []string{"", "Alpha", "a/b", "../x", "a\nb", "-a", "x.y", string(make([]byte, 64))} {
		if _, err := st.ClientFor(bad); err == nil {
			t.Errorf("ClientFor(%q) succeeded, want an error", bad)
		}
	}
	if _, err := (&Status{State: StateStopped}).ClientFor("alpha"); !errors.Is(err, ErrNotRunning) {
		t.Errorf("ClientFor on a stopped status: %v, want ErrNotRunning", err)
	}

	alpha, err := st.ClientFor("alpha")
	if err != nil {
		t.Fatal(err)
	}
	defer alpha.Close()
	beta, err := st.ClientFor("beta")
	if err != nil {
		t.Fatal(err)
	}
	defer beta.Close()
	if alpha.Cluster != nil || alpha.Maintenance != nil || alpha.Auth != nil {
		t.Error("namespaced client exposes cluster, maintenance or auth APIs")
	}

	ctx := ctxT(t)
	// beta watches its whole namespace from now on.
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	watch := beta.Watch(wctx, "", clientv3.WithPrefix())

	if _, err := alpha.Put(ctx, "k", "alpha's"); err != nil {
		t.Fatal(err)
	}
	if _, err := beta.Put(ctx, "k", "beta's"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cli  *clientv3.Client
		want string
	}{{alpha, "alpha's"}, {beta, "beta's"}} {
		// Everything the client can reach, from the smallest key up.
		resp, err := c.cli.Get(ctx, "\x00", clientv3.WithFromKey())
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != 1 || string(resp.Kvs[0].Key) != "k" || string(resp.Kvs[0].Value) != c.want {
			t.Errorf("namespace sees %v, want only k=%q", resp.Kvs, c.want)
		}
	}
	wr := <-watch
	if err := wr.Err(); err != nil {
		t.Fatal(err)
	}
	if len(wr.Events) != 1 || string(wr.Events[0].Kv.Key) != "k" || string(wr.Events[0].Kv.Value) != "beta's" {
		t.Errorf("beta's watch got %v, want only its own put", wr.Events)
	}

	// Internal keys exist, but no namespace reaches them.
	if resp, err := st.m.cli.Get(ctx, internalPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count == 0 {
		t.Fatalf("internal namespace: count %v, err %v; want keys", resp, err)
	}

	// Leases and elections work within a namespace: that is what the
	// curator's leader election needs.
	sess, err := concurrency.NewSession(alpha)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	el := concurrency.NewElection(sess, "leader")
	if err := el.Campaign(ctx, "one"); err != nil {
		t.Fatal(err)
	}
	leader, err := el.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if string(leader.Kvs[0].Value) != "one" {
		t.Errorf("election leader = %q, want %q", leader.Kvs[0].Value, "one")
	}
	if resp, err := beta.Get(ctx, "leader", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != 0 {
		t.Errorf("beta sees alpha's election keys: %v, %v", resp, err)
	}
}

// ConnectionFor gives a namespace's prefix, the one ClientFor confines to,
// and a client of its own live connection, which closing leaves the
// member's clients alone.
func TestConnectionFor(t *testing.T) {
	a := addrs(t, 1)
	svc := newService(t, bootstrapConfig(t, "one", a[0]))
	start(t, svc)
	st := waitVoter(t, svc)

	for _, bad := range []string{"", "Kube", "a/b", "../x"} {
		if _, err := st.ConnectionFor(bad); err == nil {
			t.Errorf("ConnectionFor(%q) succeeded, want an error", bad)
		}
	}
	if _, err := (&Status{State: StateStopped}).ConnectionFor("kube"); !errors.Is(err, ErrNotRunning) {
		t.Errorf("ConnectionFor on a stopped status: %v, want ErrNotRunning", err)
	}

	conn, err := st.ConnectionFor("kube")
	if err != nil {
		t.Fatal(err)
	}
	if conn.Prefix != "/namespace/kube/" {
		t.Errorf("prefix %q, want /namespace/kube/", conn.Prefix)
	}
	if conn.Client.ActiveConnection() == nil {
		t.Error("the connection's client has no gRPC connection of its own")
	}
	ns, err := st.ClientFor("kube")
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	ctx := ctxT(t)
	if _, err := conn.Client.Put(ctx, conn.Prefix+"k", "v"); err != nil {
		t.Fatal(err)
	}
	if resp, err := ns.Get(ctx, "k"); err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Errorf("the namespaced client reads %v, %v under its namespace; want the key put at the connection's prefix", resp, err)
	}
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Get(ctx, "k"); err != nil {
		t.Errorf("the member's clients stopped working when a connection closed: %v", err)
	}
}
