package etcd

import (
	"testing"

	"github.com/polis-os/polis/event"
)

// Progress answers for revisions the range's own keys never reach: after
// writes outside the range it still says, without reading the range, up
// to which snapshot Version the watcher holds every change up to etcd's
// revision; after a write inside the range as well, that Version is the
// write's, and the watcher's next Get reaches it. It asks etcd: etcd
// sends no progress of its own unless asked, so without the request it
// would wait for ever (and this test, for its context).
func TestRangeProgress(t *testing.T) {
	c := newCluster(t, 1)
	cli := c.client(t, 0)
	put(t, cli, "/nodes/a", "v1")
	r := NewPrefix(cli, "/nodes/", decodeKV)
	w := r.Watch()
	defer w.Close()
	first := get(t, w)
	p := w.(Progresser)

	// Only writes outside the range since.
	put(t, cli, "/other", "1")
	rev := put(t, cli, "/other", "2")
	v, err := p.Progress(testCtx(t), rev)
	if err != nil {
		t.Fatalf("Progress after writes outside the range: %v", err)
	}
	if v > first.Version {
		t.Fatalf("Progress = %d, want at most the first snapshot's %d: nothing in the range changed", v, first.Version)
	}

	// A write inside the range, then outside it again.
	in := put(t, cli, "/nodes/b", "v1")
	rev = put(t, cli, "/other", "3")
	v, err = p.Progress(testCtx(t), rev)
	if err != nil {
		t.Fatalf("Progress after a write inside the range: %v", err)
	}
	if v < uint64(in) {
		t.Fatalf("Progress = %d, want at least the range's write at %d", v, in)
	}
	s, err := w.Get(testCtx(t), event.Filter(func(s *event.Snapshot[kv]) bool { return s.Version >= v }))
	if err != nil {
		t.Fatal(err)
	}
	if got := snapshotKV(s); got != "/nodes/a=v1,/nodes/b=v1" {
		t.Fatalf("snapshot at the Version Progress gave = %s", got)
	}
}
