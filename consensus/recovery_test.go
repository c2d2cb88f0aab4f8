package consensus

import (
	"errors"
	"os"
	"slices"
	"testing"
)

// TestRecoverSingleMember: a three-member cluster loses two members for
// good; the survivor, prepared for recovery, restarts as the single member
// with all the data. While the others still answer, recovery is refused
// and nothing changes.
func TestRecoverSingleMember(t *testing.T) {
	fc := formCluster(t, addrs(t, 3))
	cfg, st1, two, three := fc.cfg, fc.st1, fc.joiners[0], fc.joiners[1]
	put(t, st1, "kept", "acknowledged before the loss")
	fc.stop()

	// Two and three still run: refused, and the directory is unchanged.
	before, err := os.ReadFile(layout(cfg.DataDir).identityFile())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := PrepareRecovery(ctxT(t), cfg.DataDir); !errors.Is(err, ErrQuorumAlive) {
		t.Fatalf("PrepareRecovery with live peers: %v; want ErrQuorumAlive", err)
	} else {
		t.Logf("refused as it should be: %v", err)
	}
	if after, _ := os.ReadFile(layout(cfg.DataDir).identityFile()); string(after) != string(before) {
		t.Error("a refused recovery changed identity.json")
	}

	// Lost for good.
	two.stop()
	three.stop()
	lost, err := PrepareRecovery(ctxT(t), cfg.DataDir)
	if err != nil {
		t.Fatalf("PrepareRecovery: %v", err)
	}
	if !slices.Equal(lost, []string{"three", "two"}) {
		t.Errorf("lost = %v, want [three two]", lost)
	}

	one := newService(t, cfg)
	stopOne := start(t, one)
	st := waitVoter(t, one)
	if st.ClusterID != st1.ClusterID || st.MemberID != st1.MemberID {
		t.Errorf("recovered as member %x of cluster %x, want %x of %x", st.MemberID, st.ClusterID, st1.MemberID, st1.ClusterID)
	}
	members, err := st.Members(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(members) != 1 || members[0].Name != "one" {
		t.Errorf("members after recovery = %+v, want one alone", members)
	}
	c, err := st.ClientFor("test")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Get(ctxT(t), "kept")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the key written before the loss: %v, %v", resp, err)
	}
	if _, err := c.Put(ctxT(t), "after", "written to the recovered cluster"); err != nil {
		t.Fatal(err)
	}
	c.Close()
	rec, err := st.Recovery(ctxT(t))
	if err != nil || rec == nil || rec.Member != "one" || rec.From != RecoveryFromMemberData || !slices.Equal(rec.Lost, []string{"three", "two"}) || rec.At.IsZero() {
		t.Errorf("Recovery() = %+v, %v", rec, err)
	}
	id, err := readIdentity(layout(cfg.DataDir))
	if err != nil || id.Recover != nil {
		t.Errorf("the recovery mark is still set after the recovery: %+v, %v", id, err)
	}
	stopOne()
	// A later start is an ordinary restart.
	one = newService(t, cfg)
	start(t, one)
	waitVoter(t, one)
}
