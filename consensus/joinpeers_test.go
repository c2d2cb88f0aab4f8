package consensus

import (
	"testing"

	"go.etcd.io/etcd/client/pkg/v3/types"
	"go.etcd.io/etcd/server/v3/etcdserver/api/membership"
)

// initialClusterOf names every member: this one by its own name, the
// others by theirs, by the join data's, or by their ID; it says when this
// member is missing.
func TestInitialClusterOf(t *testing.T) {
	member := func(id uint64, name, url string) *membership.Member {
		m := &membership.Member{ID: types.ID(id)}
		m.Name = name
		m.PeerURLs = []string{url}
		return m
	}
	id := &identity{Name: "two", PeerURL: "https://10.0.0.2:7834"}
	known := map[string]string{"https://10.0.0.1:7834": "one", "https://10.0.0.2:7834": "two"}
	members := []*membership.Member{
		member(1, "one", "https://10.0.0.1:7834"),
		member(2, "", "https://10.0.0.2:7834"),    // this member, not started yet
		member(0xab, "", "https://10.0.0.3:7834"), // added after the join data, not started
	}
	got, ok := initialClusterOf(members, id, known)
	want := "ab=https://10.0.0.3:7834,one=https://10.0.0.1:7834,two=https://10.0.0.2:7834"
	if !ok || got != want {
		t.Errorf("initialClusterOf = %q, %v; want %q", got, ok, want)
	}
	if _, ok := initialClusterOf(members[:1], id, known); ok {
		t.Error("a membership without this member passed")
	}
	if got := sortedCluster("two=b,one=a"); got != "one=a,two=b" {
		t.Errorf("sortedCluster = %q", got)
	}
}
