package consensus

import (
	"bufio"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/polis-os/polis/internal/testutil"
)

// joiner is a member started from join data.
type joiner struct {
	svc  *Service
	key  ed25519.PrivateKey
	stop func()
}

// join adds a learner called name through via and starts it.
func join(t *testing.T, via *Status, name, addr string) *joiner {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	jd, err := via.AddLearner(ctxT(t), name, addr, key.Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatalf("AddLearner(%s): %v", name, err)
	}
	svc := newService(t, Config{
		Name:        name,
		DataDir:     t.TempDir(),
		PeerAddress: addr,
		PeerKey:     key,
		Join:        jd,
	})
	return &joiner{svc: svc, key: key, stop: start(t, svc)}
}

// formedCluster is a cluster formed one join at a time: its first member
// bootstrapped, each further one joined through it and waited on until
// it is a voter.
type formedCluster struct {
	cfg     Config // the first member's
	first   *Service
	st1     *Status // the first member's, once a voter
	stop    func()  // stops the first member
	joiners []*joiner
}

// formCluster bootstraps "one" at a[0] and joins "two", "three", … at the
// further addresses, each a voter before the next joins.
func formCluster(t *testing.T, a []string) *formedCluster {
	t.Helper()
	names := []string{"one", "two", "three", "four", "five"}
	fc := &formedCluster{cfg: bootstrapConfig(t, names[0], a[0])}
	fc.first = newService(t, fc.cfg)
	fc.stop = start(t, fc.first)
	fc.st1 = waitVoter(t, fc.first)
	for i, addr := range a[1:] {
		j := join(t, fc.st1, names[i+1], addr)
		waitVoter(t, j.svc)
		fc.joiners = append(fc.joiners, j)
	}
	return fc
}

// put writes key = value through st's member.
func put(t *testing.T, st *Status, key, value string) {
	t.Helper()
	c, err := st.ClientFor("test")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Put(ctxT(t), key, value); err != nil {
		t.Fatal(err)
	}
}

// wantStartedVoters fails t unless st's cluster has n members, all of
// them started voters.
func wantStartedVoters(t *testing.T, st *Status, n int) {
	t.Helper()
	members, err := st.Members(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(members) != n {
		t.Fatalf("members = %+v, want %d", members, n)
	}
	for _, m := range members {
		if m.Learner || !m.Started {
			t.Errorf("member %+v: want a started voter", m)
		}
	}
}

// TestCluster forms a three-member cluster by joins, replicates a write,
// and removes a member, whose certificate must then be refused by every
// remaining member.
func TestCluster(t *testing.T) {
	a := addrs(t, 3)
	fc := formCluster(t, a[:1])
	one, st1 := fc.first, fc.st1

	// Joins: each member starts as a learner and promotes itself.
	two := join(t, st1, "two", a[1])
	waitFor(t, two.svc, "running", IsRunning)
	st2 := waitVoter(t, two.svc)
	three := join(t, st1, "three", a[2])
	st3 := waitVoter(t, three.svc)
	if st2.ClusterID != st1.ClusterID || st3.ClusterID != st1.ClusterID {
		t.Fatalf("cluster IDs differ: %x %x %x", st1.ClusterID, st2.ClusterID, st3.ClusterID)
	}
	wantStartedVoters(t, st1, 3)
	leaders := 0
	for _, svc := range []*Service{one, two.svc, three.svc} {
		st := waitFor(t, svc, "following a leader", func(s *Status) bool { return IsVoter(s) && s.LeaderID != 0 })
		if st.Leader {
			leaders++
		}
	}
	if leaders != 1 {
		t.Errorf("%d members report being leader, want 1", leaders)
	}

	// A write on one member is read (linearizably) on another.
	c1, err := st1.ClientFor("test")
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	if _, err := c1.Put(ctxT(t), "greeting", "hello from one"); err != nil {
		t.Fatal(err)
	}
	c3, err := st3.ClientFor("test")
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	resp, err := c3.Get(ctxT(t), "greeting")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "hello from one" {
		t.Errorf("read on three: %v, want the write of one", resp.Kvs)
	}

	// Removal. Keep three's credentials: they are what a removed member
	// would try to come back with.
	removedCreds := peerCreds(t, three.svc)
	validCreds := peerCreds(t, two.svc)
	if err := peerGet(a[0], removedCreds); err != nil {
		t.Fatalf("before removal, three's certificate is refused: %v", err)
	}
	if err := st1.Remove(ctxT(t), "three"); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	waitStoppedWith(t, three.svc, ErrRemoved)
	three.stop()
	for _, addr := range a[:2] {
		testutil.Eventually(t, waitTimeout, "revoked certificate refused by "+addr, func() error {
			if err := peerGet(addr, removedCreds); err == nil {
				return fmt.Errorf("peer %s accepts the revoked certificate", addr)
			}
			return nil
		})
		if err := peerGet(addr, validCreds); err != nil {
			t.Errorf("peer %s refuses a valid certificate: %v", addr, err)
		}
	}
	members, err := st1.Members(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(members) != 2 {
		t.Errorf("members after removal = %+v, want 2", members)
	}

	// The removed member, restarted from its data, does not come back.
	restarted := newService(t, three.svc.cfg)
	stop := start(t, restarted)
	waitStoppedWith(t, restarted, ErrRemoved)
	stop()

	// The remaining two still replicate.
	c2, err := st2.ClientFor("test")
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := c2.Put(ctxT(t), "after", "removal"); err != nil {
		t.Fatal(err)
	}
	resp, err = c1.Get(ctxT(t), "after")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 {
		t.Errorf("write on two after removal not read on one")
	}
}

// TestTwoLearnersAtOnce: a one-voter cluster takes two learners at once
// (MaxLearners; etcd's default is one), and both promote themselves,
// whatever the order their promotions reach the leader in.
func TestTwoLearnersAtOnce(t *testing.T) {
	a := addrs(t, 3)
	st1 := formCluster(t, a[:1]).st1
	two := join(t, st1, "two", a[1])
	three := join(t, st1, "three", a[2])
	waitVoter(t, two.svc)
	waitVoter(t, three.svc)
	wantStartedVoters(t, st1, 3)
}

// peerCreds is the TLS client configuration a member uses towards its
// peers, read from its data directory.
func peerCreds(t *testing.T, svc *Service) *tls.Config {
	t.Helper()
	l := layout(svc.cfg.DataDir)
	cert, err := tls.LoadX509KeyPair(l.peerCertFile(), l.peerKeyFile())
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(l.caFile())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool}
}

// peerGet makes a fresh mTLS connection to a member's peer server and asks
// it for its version, as a member reconnecting to the mesh would. It
// manages the connection itself so that nothing outlives the call.
func peerGet(addr string, creds *tls.Config) error {
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 10 * time.Second}, Config: creds}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(conn, "GET /version HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", addr); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.ReadAll(resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %s", resp.Status)
	}
	return nil
}
