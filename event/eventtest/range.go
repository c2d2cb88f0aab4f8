package eventtest

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/polis-os/polis/event"
)

// RangeBackend describes a range implementation under test. The suite puts
// ints under keys it names.
type RangeBackend struct {
	// New returns a new, empty range and functions that put and delete
	// its keys. They are only called from the test's goroutine and should
	// fail the test (t.Fatal) if the write fails.
	New func(t *testing.T) (put func(key string, d int), del func(key string), r event.RangeWatch[int])
	// Patience, Quiet and LeakOptions are as in Backend.
	Patience, Quiet time.Duration
	LeakOptions     []goleak.Option
}

// RunRange runs the range suite against b.
func RunRange(t *testing.T, b RangeBackend) {
	vb := Backend{Patience: b.Patience, Quiet: b.Quiet}
	if vb.Patience == 0 {
		vb.Patience = 10 * time.Second
	}
	if vb.Quiet == 0 {
		vb.Quiet = 50 * time.Millisecond
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, b Backend, put func(string, int), del func(string), r event.RangeWatch[int])
	}{
		{"FirstGetOfEmptyRange", testRangeFirstGetEmpty},
		{"FirstGetListsCurrent", testRangeFirstGetListsCurrent},
		{"ChangedSinceLastGet", testRangeChanged},
		{"CreateDeleteBetweenGets", testRangeCreateDelete},
		{"MonotonicVersions", testRangeMonotonic},
		{"Inputs", testRangeInputs},
		{"CloseDuringGet", testRangeCloseDuringGet},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checkLeaks(t, b.LeakOptions)
			put, del, r := b.New(t)
			tc.fn(t, vb, put, del, r)
		})
	}
}

func watchRange(t *testing.T, r event.RangeWatch[int]) event.Watcher[*event.Snapshot[int]] {
	w := r.Watch()
	t.Cleanup(func() { w.Close() })
	return w
}

func (b Backend) getSnap(t *testing.T, w event.Watcher[*event.Snapshot[int]]) *event.Snapshot[int] {
	t.Helper()
	s, err := w.Get(b.ctx(t))
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	return s
}

func (b Backend) mustBlockRange(t *testing.T, w event.Watcher[*event.Snapshot[int]]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), b.Quiet)
	defer cancel()
	if s, err := w.Get(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get = %+v, %v; want it to block", s, err)
	}
}

// data is a snapshot's keys and data, for comparisons.
func data(s *event.Snapshot[int]) map[string]int {
	m := map[string]int{}
	for k, e := range s.Entries {
		m[k] = e.Data
	}
	return m
}

func testRangeFirstGetEmpty(t *testing.T, b Backend, put func(string, int), _ func(string), r event.RangeWatch[int]) {
	w := watchRange(t, r)
	if s := b.getSnap(t, w); len(s.Entries) != 0 || len(s.Changed) != 0 {
		t.Fatalf("first Get of an empty range = %+v", s)
	}
	b.mustBlockRange(t, w)
	put("a", 1)
	if s := b.getSnap(t, w); !maps.Equal(data(s), map[string]int{"a": 1}) || !slices.Equal(s.Changed, []string{"a"}) {
		t.Fatalf("Get after a put = %v changed %v", data(s), s.Changed)
	}
}

func testRangeFirstGetListsCurrent(t *testing.T, b Backend, put func(string, int), _ func(string), r event.RangeWatch[int]) {
	put("a", 1)
	put("b", 2)
	w := watchRange(t, r)
	s := b.getSnap(t, w)
	if want := map[string]int{"a": 1, "b": 2}; !maps.Equal(data(s), want) {
		t.Fatalf("first Get = %v, want %v", data(s), want)
	}
	if !slices.Equal(s.Changed, []string{"a", "b"}) {
		t.Fatalf("first Get changed %v, want every key", s.Changed)
	}
	for k, e := range s.Entries {
		if e.Version == 0 || e.Version > s.Version || e.Err != nil {
			t.Fatalf("entry %s = %+v in a snapshot at version %d", k, e, s.Version)
		}
	}
	b.mustBlockRange(t, w)
}

func testRangeChanged(t *testing.T, b Backend, put func(string, int), del func(string), r event.RangeWatch[int]) {
	put("a", 1)
	put("b", 1)
	put("c", 1)
	w := watchRange(t, r)
	b.getSnap(t, w)
	put("a", 2)
	put("a", 3)
	del("b")
	put("d", 1)
	want := map[string]int{"a": 3, "c": 1, "d": 1}
	changed := map[string]bool{}
	for {
		s := b.getSnap(t, w)
		for _, k := range s.Changed {
			changed[k] = true
		}
		if maps.Equal(data(s), want) {
			break
		}
	}
	if got := slices.Sorted(maps.Keys(changed)); !slices.Equal(got, []string{"a", "b", "d"}) {
		t.Fatalf("changed keys %v, want a, b and d", got)
	}
	b.mustBlockRange(t, w)
}

// A key created and deleted between two Gets is reported only if a Get saw
// it exist: never as the deletion of a key the consumer never knew.
func testRangeCreateDelete(t *testing.T, b Backend, put func(string, int), del func(string), r event.RangeWatch[int]) {
	w := watchRange(t, r)
	b.getSnap(t, w)
	put("x", 1)
	del("x")
	put("done", 1)
	seenX := false
	for {
		s := b.getSnap(t, w)
		_, has := s.Entries["x"]
		if slices.Contains(s.Changed, "x") && !has && !seenX {
			t.Fatalf("snapshot %+v reports the deletion of x, which no Get showed", s)
		}
		seenX = seenX || has
		if _, ok := s.Entries["done"]; ok {
			if has {
				t.Fatalf("x still listed after its deletion")
			}
			break
		}
	}
}

func testRangeMonotonic(t *testing.T, b Backend, put func(string, int), _ func(string), r event.RangeWatch[int]) {
	w := watchRange(t, r)
	vw, ok := w.(event.Versioned)
	if !ok {
		t.Fatalf("range watchers must report versions")
	}
	const final = 40
	done := make(chan error, 1)
	go func() {
		var last uint64
		for {
			s, err := getWithin(b, w)
			if err != nil {
				done <- err
				return
			}
			if s.Version < last || (last != 0 && s.Version == last) || vw.LastVersion() != s.Version {
				done <- errors.New("versions went backwards or stood still")
				return
			}
			last = s.Version
			if s.Entries["a"].Data == final {
				done <- nil
				return
			}
		}
	}()
	// Keys re-changed in turn: a key that changes again must not take a
	// snapshot back to an older version.
	for i := 1; i <= final; i++ {
		put("b", i)
		put("c", i)
		put("a", i)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func testRangeInputs(t *testing.T, b Backend, put func(string, int), _ func(string), r event.RangeWatch[int]) {
	var in event.Inputs
	defer in.Close()
	nodes := event.Input(&in, event.ValueWatch[*event.Snapshot[int]](r), func(s *event.Snapshot[int]) bool { return len(s.Entries) >= 2 })
	ctx := b.ctx(t)
	put("a", 1)
	put("b", 1)
	if _, err := in.Wait(ctx); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if got := data(nodes.Latest()); len(got) != 2 {
		t.Fatalf("Latest = %v", got)
	}
	put("a", 2)
	why, err := in.Wait(ctx)
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if !nodes.Changed() || len(why.Changes) != 1 || why.Changes[0].To <= why.Changes[0].From {
		t.Fatalf("Why = %v", why)
	}
}

func testRangeCloseDuringGet(t *testing.T, b Backend, _ func(string, int), _ func(string), r event.RangeWatch[int]) {
	w := r.Watch()
	b.getSnap(t, w)
	errc := make(chan error, 1)
	go func() {
		_, err := w.Get(b.ctx(t))
		errc <- err
	}()
	w.Close()
	if err := <-errc; !errors.Is(err, event.ErrClosed) {
		t.Fatalf("Get during Close: %v, want ErrClosed", err)
	}
	if _, err := w.Get(b.ctx(t)); !errors.Is(err, event.ErrClosed) {
		t.Fatalf("Get after Close: %v", err)
	}
}
