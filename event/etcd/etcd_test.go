package etcd

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/event/eventtest"
	"github.com/polis-os/polis/internal/testutil"
)

func TestMain(m *testing.M) {
	// Stopping an embedded etcd member leaves its peers' idle HTTP keep-alive
	// connections (raft's peer transport) open until they time out. This
	// package runs no HTTP of its own, so those are the only HTTP
	// connection goroutines that can be left.
	goleak.VerifyTestMain(m, testutil.EtcdLeakOptions()...)
}

// decodeInt reads decimal numbers; a deleted key decodes as -1.
func decodeInt(_, value []byte) (int, error) {
	if value == nil {
		return -1, nil
	}
	return strconv.Atoi(string(value))
}

// kv is what a range watcher of decodeKV delivers.
type kv struct {
	key, value string
	deleted    bool
}

func decodeKV(key, value []byte) (kv, error) {
	if string(value) == "corrupt" {
		return kv{}, errors.New("corrupt data")
	}
	return kv{key: string(key), value: string(value), deleted: value == nil}, nil
}

func put(t testing.TB, cli *clientv3.Client, key, value string) int64 {
	t.Helper()
	resp, err := cli.Put(testCtx(t), key, value)
	if err != nil {
		t.Fatalf("Put %s: %v", key, err)
	}
	return resp.Header.Revision
}

func TestConformance(t *testing.T) {
	c := newCluster(t, 1)
	// The server starts some of its goroutines on its first connection: make
	// that happen before the suite counts goroutines.
	put(t, c.client(t, 0), "/warmup", "")
	n := 0
	eventtest.Run(t, eventtest.Backend{
		New: func(t *testing.T) (func(int), event.ValueWatch[int]) {
			// A client per subtest, closed by its cleanup: clientv3 keeps
			// idle watch streams for reuse, which the suite's leak check
			// would rightly count against the subtest.
			cli := c.client(t, 0)
			n++
			key := fmt.Sprintf("/conformance/%d", n)
			return func(d int) { put(t, cli, key, strconv.Itoa(d)) }, NewValue(cli, key, decodeInt)
		},
		// Unlike memory, a Set reaches watchers through etcd: allow for it
		// when concluding that a Get keeps blocking.
		Quiet: 200 * time.Millisecond,
		Delete: func(t *testing.T, v event.ValueWatch[int]) {
			ev := v.(*Value[int])
			if _, err := ev.Client.Delete(testCtx(t), ev.Key); err != nil {
				t.Fatalf("Delete %s: %v", ev.Key, err)
			}
		},
		Deleted: -1,
	})
}

func get[T any](t testing.TB, w event.Watcher[T], opts ...event.GetOption[T]) T {
	t.Helper()
	d, err := w.Get(testCtx(t), opts...)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	return d
}

func mustBlock[T any](t testing.TB, w event.Watcher[T]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if d, err := w.Get(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get = %v, %v; want it to block", d, err)
	}
}

func TestSingleKeyDeletion(t *testing.T) {
	cli, v, w := watchedValue(t, "/k")
	put(t, cli, "/k", "1")
	if d := get(t, w); d != 1 {
		t.Fatalf("Get = %d", d)
	}
	if _, err := cli.Delete(testCtx(t), "/k"); err != nil {
		t.Fatal(err)
	}
	if d := get(t, w); d != -1 {
		t.Fatalf("Get after delete = %d, want the decoder's deletion value", d)
	}
	// A new watcher of a deleted key sees an unset value.
	w2 := v.Watch()
	defer w2.Close()
	mustBlock(t, w2)
}

// Writing the same bytes again is a new revision but not a new value.
func TestDuplicatesDoNotWake(t *testing.T) {
	cli, _, w := watchedValue(t, "/dup")
	put(t, cli, "/dup", "7")
	get(t, w)
	put(t, cli, "/dup", "7")
	put(t, cli, "/dup", "7")
	mustBlock(t, w)
	put(t, cli, "/dup", "8")
	if d := get(t, w); d != 8 {
		t.Fatalf("Get = %d, want 8", d)
	}
}

func TestDecoderErrorKeepsWatcherWorking(t *testing.T) {
	cli, _, w := watchedValue(t, "/bad")
	rev := put(t, cli, "/bad", "not a number")
	_, err := w.Get(testCtx(t))
	if err == nil || !strings.Contains(err.Error(), `"/bad"`) || !strings.Contains(err.Error(), strconv.FormatInt(rev, 10)) {
		t.Fatalf("Get of corrupt data = %v, want an error naming the key and revision", err)
	}
	var numErr *strconv.NumError
	if !errors.As(err, &numErr) {
		t.Fatalf("the decoder's error is not wrapped: %v", err)
	}
	put(t, cli, "/bad", "5")
	if d := get(t, w); d != 5 {
		t.Fatalf("Get after a good write = %d", d)
	}
}

func TestRangeConformance(t *testing.T) {
	c := newCluster(t, 1)
	put(t, c.client(t, 0), "/warmup", "")
	n := 0
	eventtest.RunRange(t, eventtest.RangeBackend{
		New: func(t *testing.T) (func(string, int), func(string), event.RangeWatch[int]) {
			cli := c.client(t, 0)
			n++
			prefix := fmt.Sprintf("/conformance-range/%d/", n)
			set := func(k string, d int) { put(t, cli, prefix+k, strconv.Itoa(d)) }
			del := func(k string) {
				if _, err := cli.Delete(testCtx(t), prefix+k); err != nil {
					t.Fatalf("Delete %s: %v", k, err)
				}
			}
			return set, del, &trimmed{NewPrefix(cli, prefix, decodeInt), prefix}
		},
		Quiet: 200 * time.Millisecond,
	})
}

// trimmed presents a range's keys without their prefix, as the suite names
// them.
type trimmed struct {
	r      *Range[int]
	prefix string
}

func (tr *trimmed) Watch() event.Watcher[*event.Snapshot[int]] {
	return &trimmedWatcher{tr.r.Watch(), tr.prefix}
}

type trimmedWatcher struct {
	event.Watcher[*event.Snapshot[int]]
	prefix string
}

func (tw *trimmedWatcher) Get(ctx context.Context, opts ...event.GetOption[*event.Snapshot[int]]) (*event.Snapshot[int], error) {
	s, err := tw.Watcher.Get(ctx, opts...)
	if err != nil {
		return nil, err
	}
	out := &event.Snapshot[int]{Version: s.Version, Entries: map[string]event.Entry[int]{}}
	for k, e := range s.Entries {
		out.Entries[strings.TrimPrefix(k, tw.prefix)] = e
	}
	for _, k := range s.Changed {
		out.Changed = append(out.Changed, strings.TrimPrefix(k, tw.prefix))
	}
	return out, nil
}

func (tw *trimmedWatcher) LastVersion() uint64 {
	return tw.Watcher.(event.Versioned).LastVersion()
}

// snapshotKV renders a snapshot's entries as "key=value" in key order.
func snapshotKV(s *event.Snapshot[kv]) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(s.Entries)) {
		out = append(out, k+"="+s.Entries[k].Data.value)
	}
	return strings.Join(out, ",")
}

func TestRangeSnapshots(t *testing.T) {
	c := newCluster(t, 1)
	cli := c.client(t, 0)
	for _, k := range []string{"a", "b", "c"} {
		put(t, cli, "/nodes/"+k, "v1")
	}
	put(t, cli, "/other", "not in range")
	r := NewPrefix(cli, "/nodes/", decodeKV)
	w := r.Watch()
	defer w.Close()
	first := get(t, w)
	if got := snapshotKV(first); got != "/nodes/a=v1,/nodes/b=v1,/nodes/c=v1" {
		t.Fatalf("first snapshot = %s", got)
	}

	put(t, cli, "/nodes/a", "v2")
	put(t, cli, "/nodes/a", "v3")
	if _, err := cli.Delete(testCtx(t), "/nodes/b"); err != nil {
		t.Fatal(err)
	}
	rev := put(t, cli, "/nodes/d", "v1")
	changed := map[string]bool{}
	var s *event.Snapshot[kv]
	for s == nil || s.Version < uint64(rev) {
		s = get(t, w)
		for _, k := range s.Changed {
			changed[k] = true
		}
	}
	if got := snapshotKV(s); got != "/nodes/a=v3,/nodes/c=v1,/nodes/d=v1" {
		t.Fatalf("snapshot = %s", got)
	}
	if got := slices.Sorted(maps.Keys(changed)); !slices.Equal(got, []string{"/nodes/a", "/nodes/b", "/nodes/d"}) {
		t.Fatalf("changed = %v", got)
	}
	if s.Entries["/nodes/c"].Version != first.Entries["/nodes/c"].Version {
		t.Fatalf("an unchanged key changed version")
	}
	mustBlock(t, w)
}

// One corrupt key is reported for that key and in Health; the other keys,
// and the watcher, go on.
func TestRangeCorruptKey(t *testing.T) {
	c := newCluster(t, 1)
	cli := c.client(t, 0)
	put(t, cli, "/r/good", "1")
	rev := put(t, cli, "/r/bad", "corrupt")
	r := NewPrefix(cli, "/r/", decodeKV)
	health := r.Health().Watch()
	defer health.Close()
	w := r.Watch()
	defer w.Close()
	s := get(t, w)
	bad := s.Entries["/r/bad"]
	if bad.Err == nil || !strings.Contains(bad.Err.Error(), `"/r/bad"`) || !strings.Contains(bad.Err.Error(), strconv.FormatInt(rev, 10)) {
		t.Fatalf("corrupt entry = %+v, want an error naming the key and revision", bad)
	}
	if good := s.Entries["/r/good"]; good.Err != nil || good.Data.value != "1" {
		t.Fatalf("good entry = %+v", good)
	}
	if _, err := health.Get(testCtx(t), event.Filter(func(h Health) bool { return slices.Equal(h.Corrupt, []string{"/r/bad"}) })); err != nil {
		t.Fatalf("Health never listed the corrupt key: %v", err)
	}
	put(t, cli, "/r/bad", "fixed")
	s = get(t, w)
	if e := s.Entries["/r/bad"]; e.Err != nil || e.Data.value != "fixed" {
		t.Fatalf("repaired entry = %+v", e)
	}
	if _, err := health.Get(testCtx(t), event.Filter(func(h Health) bool { return len(h.Corrupt) == 0 })); err != nil {
		t.Fatalf("Health never dropped the repaired key: %v", err)
	}
}

// While a member is down, keys change and the history is compacted: the
// watcher, talking only to that member, must resume by re-reading and report
// the keys that changed and the ones deleted during the gap.
func TestMemberRestartAndCompaction(t *testing.T) {
	c := newCluster(t, 3)
	watched := (c.leader(t) + 1) % 3 // a follower, so the others keep quorum
	writer := c.client(t, (watched+1)%3, (watched+2)%3)
	put(t, writer, "/gap/keep", "1")
	put(t, writer, "/gap/gone", "1")

	r := NewPrefix(c.client(t, watched), "/gap/", decodeKV)
	w := r.Watch()
	defer w.Close()
	if got := snapshotKV(get(t, w)); got != "/gap/gone=1,/gap/keep=1" {
		t.Fatalf("first snapshot = %s", got)
	}
	health := r.Health().Watch()
	defer health.Close()
	if _, err := health.Get(testCtx(t), event.Filter(func(h Health) bool { return h.Connected })); err != nil {
		t.Fatal(err)
	}

	c.stopMember(watched)
	put(t, writer, "/gap/keep", "2")
	if _, err := writer.Delete(testCtx(t), "/gap/gone"); err != nil {
		t.Fatal(err)
	}
	rev := put(t, writer, "/gap/new", "1")
	if _, err := writer.Compact(testCtx(t), rev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	c.restartMember(watched)

	s := get(t, w)
	if got := snapshotKV(s); got != "/gap/keep=2,/gap/new=1" {
		t.Fatalf("snapshot after the gap = %s", got)
	}
	if !slices.Equal(s.Changed, []string{"/gap/gone", "/gap/keep", "/gap/new"}) {
		t.Fatalf("changed after the gap = %v", s.Changed)
	}
	mustBlock(t, w)
	if _, err := health.Get(testCtx(t), event.Filter(func(h Health) bool { return h.Connected && h.Revision >= rev })); err != nil {
		t.Fatalf("health never recovered: %v", err)
	}
}

// Updates written across a leader change all reach a watcher on a follower.
func TestLeaderChange(t *testing.T) {
	c := newCluster(t, 3)
	leader := c.leader(t)
	watched := (leader + 1) % 3
	other := (leader + 2) % 3
	writer := c.client(t, watched, other)
	v := NewValue(c.client(t, watched), "/leader-change", decodeInt)
	w := v.Watch()
	defer w.Close()

	put(t, writer, "/leader-change", "1")
	if d := get(t, w); d != 1 {
		t.Fatalf("Get = %d", d)
	}
	c.stopMember(leader)
	if nl := c.leader(t); nl == leader {
		t.Fatalf("leader did not change")
	}
	for i := 2; i <= 10; i++ {
		put(t, writer, "/leader-change", strconv.Itoa(i))
	}
	last := 1
	for last != 10 {
		d := get(t, w)
		if d <= last {
			t.Fatalf("Get = %d after %d", d, last)
		}
		last = d
	}
	c.restartMember(leader)
}

// A watch whose member lost its raft leader for longer than etcd lets a
// watch live without one (three election timeouts) resumes from its
// revision once the member has a leader again: it stays established
// throughout (Connected never drops), nothing is re-read, and the changes
// made after are delivered.
func TestLeaderlessWatchResumes(t *testing.T) {
	c := newCluster(t, 3)
	watched := (c.leader(t) + 1) % 3
	others := []int{(watched + 1) % 3, (watched + 2) % 3}
	writer := c.client(t, others...)
	put(t, writer, "/leaderless/a", "1")
	r := NewPrefix(c.client(t, watched), "/leaderless/", decodeKV)
	// Long enough for two members to restart on a loaded machine.
	r.LeaderlessGrace = time.Minute
	w := r.Watch()
	defer w.Close()
	if got := snapshotKV(get(t, w)); got != "/leaderless/a=1" {
		t.Fatalf("first snapshot = %s", got)
	}
	health := r.Health().Watch()
	defer health.Close()
	h, err := health.Get(testCtx(t), event.Filter(func(h Health) bool { return h.Connected }))
	if err != nil {
		t.Fatal(err)
	}
	listedAt := h.Revision
	// Every Health published from here on: Connected must never drop.
	var dropped atomic.Bool
	healthDone := make(chan struct{})
	hctx, hcancel := context.WithCancel(testCtx(t))
	go func() {
		defer close(healthDone)
		for {
			h, err := health.Get(hctx)
			if err != nil {
				return
			}
			if !h.Connected {
				dropped.Store(true)
			}
		}
	}()
	defer func() { hcancel(); <-healthDone }()

	// The other two stop: the watched member has no leader until they
	// come back, and etcd ends its watches meanwhile.
	for _, i := range others {
		c.stopMember(i)
	}
	if _, err := event.Get(testCtx(t), r.Health(), event.Filter(func(h Health) bool { return h.Leaderless == 1 })); err != nil {
		t.Fatalf("the watch never lost its leader: %v", err)
	}
	for _, i := range others {
		c.restartMember(i)
	}
	if _, err := event.Get(testCtx(t), r.Health(), event.Filter(func(h Health) bool { return h.Leaderless == 0 })); err != nil {
		t.Fatalf("the watch never resumed: %v", err)
	}
	put(t, writer, "/leaderless/b", "1")
	if got := snapshotKV(get(t, w)); got != "/leaderless/a=1,/leaderless/b=1" {
		t.Fatalf("snapshot after the election = %s", got)
	}
	h, err = event.Get(testCtx(t), r.Health())
	if err != nil {
		t.Fatal(err)
	}
	if dropped.Load() || !h.Connected || h.Relists != 0 || h.Revision != listedAt {
		t.Errorf("health after the election: %+v (Connected dropped: %t); want connected throughout, no re-listing, listed at %d", h, dropped.Load(), listedAt)
	}
}

// waitSeen polls until v's watchers have seen revision rev.
func waitSeen[T any](t testing.TB, v *Value[T], rev int64) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, fmt.Sprintf("watchers seeing revision %d", rev), func() error {
		if at := int64(v.Info().Version); at < rev {
			return fmt.Errorf("at revision %d", at)
		}
		return nil
	})
}

// watchedValue starts a one-member cluster and watches key there as a
// Value of ints: the client, the value, and a watcher closed as the test
// ends.
func watchedValue(t *testing.T, key string) (*clientv3.Client, *Value[int], event.Watcher[int]) {
	t.Helper()
	cli := newCluster(t, 1).client(t, 0)
	v := NewValue(cli, key, decodeInt)
	w := v.Watch()
	t.Cleanup(func() { w.Close() })
	return cli, v, w
}

// A key created and deleted before the first Get was never there as far as
// the watcher's consumer knows: the first Get keeps blocking, as it does
// while the key does not exist, instead of returning a deletion.
func TestSingleKeyCreateDeleteBeforeFirstGet(t *testing.T) {
	cli, v, w := watchedValue(t, "/flash")
	health := v.Health().Watch()
	defer health.Close()
	if _, err := health.Get(testCtx(t), event.Filter(func(h Health) bool { return h.Connected })); err != nil {
		t.Fatal(err)
	}
	put(t, cli, "/flash", "1")
	resp, err := cli.Delete(testCtx(t), "/flash")
	if err != nil {
		t.Fatal(err)
	}
	waitSeen(t, v, resp.Header.Revision)
	mustBlock(t, w)
	put(t, cli, "/flash", "2")
	if d := get(t, w); d != 2 {
		t.Fatalf("Get = %d, want 2", d)
	}
}

// Health sums the value's watchers, is not touched by ordinary updates, and
// is not Connected once nobody watches.
func TestHealthPerValue(t *testing.T) {
	cli := newCluster(t, 1).client(t, 0)
	v := NewValue(cli, "/health", decodeInt)
	health := v.Health().Watch()
	defer health.Close()
	w1, w2 := v.Watch(), v.Watch()
	h, err := health.Get(testCtx(t), event.Filter(func(h Health) bool { return h.Established == 2 }))
	if err != nil {
		t.Fatal(err)
	}
	if !h.Connected || h.Watchers != 2 || h.Err != nil {
		t.Fatalf("Health with two connected watchers = %+v", h)
	}
	var rev int64
	for i := range 20 {
		rev = put(t, cli, "/health", strconv.Itoa(i))
	}
	waitSeen(t, v, rev)
	mustBlock(t, health) // updates are not health events
	w1.Close()
	if h = get(t, health); !h.Connected || h.Watchers != 1 || h.Established != 1 {
		t.Fatalf("Health with one watcher left = %+v", h)
	}
	w2.Close()
	if h = get(t, health); h.Connected || h.Watchers != 0 {
		t.Fatalf("Health with no watcher = %+v, want not connected", h)
	}
}
