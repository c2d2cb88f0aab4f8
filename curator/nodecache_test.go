package curator

import (
	"slices"
	"testing"

	cpb "github.com/polis-os/polis/api/curator/v1"
)

// TestChangedSince checks the walk a watcher makes from the snapshot it
// has to the newest: the union of the change lists in between, sorted and
// once each, and no answer (compare every record instead) when the chain
// is broken or longer than the limit.
func TestChangedSince(t *testing.T) {
	chain := func(changes ...[]string) []*nodeSnapshot {
		var snaps []*nodeSnapshot
		for i, c := range changes {
			s := &nodeSnapshot{changed: c}
			if i > 0 {
				snaps[i-1].next.Store(s)
			}
			snaps = append(snaps, s)
		}
		return snaps
	}
	s := chain([]string{"a", "b", "c"}, []string{"c"}, []string{"b", "a"}, []string{"d"})

	for _, tc := range []struct {
		from, to int
		limit    int
		want     []string
		ok       bool
	}{
		{from: 0, to: 0, limit: 10, want: nil, ok: true},
		{from: 0, to: 1, limit: 10, want: []string{"c"}, ok: true},
		{from: 1, to: 3, limit: 10, want: []string{"a", "b", "d"}, ok: true},
		{from: 0, to: 3, limit: 10, want: []string{"a", "b", "c", "d"}, ok: true},
		{from: 0, to: 3, limit: 3, ok: false},  // four changes listed
		{from: 3, to: 0, limit: 10, ok: false}, // not a successor
	} {
		got, ok := s[tc.to].changedSince(s[tc.from], tc.limit)
		if ok != tc.ok || !slices.Equal(got, tc.want) {
			t.Errorf("from %d to %d, limit %d: %v, %t; want %v, %t", tc.from, tc.to, tc.limit, got, ok, tc.want, tc.ok)
		}
	}
	// A snapshot of another run of the cache (no chain to it).
	if _, ok := (&nodeSnapshot{}).changedSince(s[0], 10); ok {
		t.Error("a snapshot of another run: want no answer")
	}
}

// A detached snapshot (what a call's context keeps) has the data of its
// original but no way to the snapshots after it, so a long call does not
// keep them alive.
func TestDetachedSnapshot(t *testing.T) {
	s := &nodeSnapshot{nodes: map[string]*cpb.Node{"a": {Id: "a"}}, complete: true, revision: 7, keys: 1, changed: []string{"a"}, curators: &curatorSet{}}
	d := s.detached()
	s.next.Store(&nodeSnapshot{revision: 8})
	if d.nodes["a"] != s.nodes["a"] || !d.complete || d.revision != 7 || d.keys != 1 || d.curators != s.curators {
		t.Errorf("detached %+v lost data of %+v", d, s)
	}
	if d.next.Load() != nil || d.changed != nil {
		t.Error("a detached snapshot still leads to later ones")
	}
}
