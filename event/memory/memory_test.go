package memory

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/event/eventtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestConformance(t *testing.T) {
	eventtest.Run(t, eventtest.Backend{
		New: func(t *testing.T) (func(int), event.ValueWatch[int]) {
			var v Value[int]
			return v.Set, &v
		},
	})
}

func TestConformanceWithEqual(t *testing.T) {
	eventtest.Run(t, eventtest.Backend{
		New: func(t *testing.T) (func(int), event.ValueWatch[int]) {
			v := &Value[int]{Name: "conformance-equal", Equal: Equal[int]}
			return v.Set, v
		},
	})
}

func ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// A Set whose data equals the current data is dropped when Equal is set: the
// version does not move and watchers stay asleep.
func TestEqualSuppressesWakeups(t *testing.T) {
	v := Value[string]{Name: "equal", Equal: Equal[string]}
	v.Set("a")
	w := v.Watch()
	defer w.Close()
	if d, err := w.Get(ctx(t)); err != nil || d != "a" {
		t.Fatalf("Get = %q, %v", d, err)
	}
	ready := w.Ready()
	v.Set("a")
	if got := v.Info().Version; got != 1 {
		t.Fatalf("version after an equal Set = %d, want 1", got)
	}
	select {
	case <-ready:
		t.Fatalf("an equal Set woke the watcher")
	default:
	}
	v.Set("b")
	if d, err := w.Get(ctx(t)); err != nil || d != "b" {
		t.Fatalf("Get = %q, %v", d, err)
	}

	// Without Equal, the same data is a new version.
	var plain Value[string]
	plain.Set("a")
	plain.Set("a")
	if got := plain.Info().Version; got != 2 {
		t.Fatalf("version without Equal = %d, want 2", got)
	}
}

// Set must not wait for anybody: not for a watcher that never reads, nor for
// one that is blocked in Get, nor for one whose context is gone.
func TestSetNeverBlocks(t *testing.T) {
	var v Value[int]
	abandoned := v.Watch() // never read, never closed until the end
	defer abandoned.Close()
	blocked := v.Watch()
	defer blocked.Close()
	v.Set(0)
	if _, err := blocked.Get(ctx(t)); err != nil {
		t.Fatal(err)
	}
	got := make(chan int, 1)
	go func() {
		d, _ := blocked.Get(context.Background())
		got <- d
	}()
	for i := 1; i <= 100000; i++ {
		v.Set(i)
	}
	if d := <-got; d < 1 {
		t.Fatalf("blocked Get = %d, want a value that was Set", d)
	}
	if d, err := abandoned.Get(ctx(t)); err != nil || d != 100000 {
		t.Fatalf("abandoned watcher Get = %d, %v; want the newest data", d, err)
	}
}

func TestInfoCountsWatchers(t *testing.T) {
	v := Value[int]{Name: "info"}
	if info := v.Info(); info != (event.Info{Name: "info"}) {
		t.Fatalf("Info of a new value = %+v", info)
	}
	w1, w2 := v.Watch(), v.Watch()
	v.Set(5)
	if info := v.Info(); info.Watchers != 2 || info.Version != 1 {
		t.Fatalf("Info = %+v, want 2 watchers at version 1", info)
	}
	w1.Close()
	w1.Close()
	if info := v.Info(); info.Watchers != 1 {
		t.Fatalf("Info after closing one watcher twice = %+v, want 1 watcher", info)
	}
	w2.Close()
	if info := v.Info(); info.Watchers != 0 {
		t.Fatalf("Info after closing all = %+v", info)
	}
}

func TestLastVersion(t *testing.T) {
	var v Value[int]
	w := v.Watch()
	defer w.Close()
	vw := w.(event.Versioned)
	if got := vw.LastVersion(); got != 0 {
		t.Fatalf("LastVersion before Get = %d", got)
	}
	v.Set(10)
	v.Set(11)
	if _, err := w.Get(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if got := vw.LastVersion(); got != 2 {
		t.Fatalf("LastVersion = %d, want 2", got)
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	if err := RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	// The vectors are process-wide: use a name no other test uses, and
	// compare with the figures from before (tests may run with -count).
	const name = "metrics-test"
	base := map[string]float64{
		"sets":       testutil.ToFloat64(setsTotal.WithLabelValues(name)),
		"deliveries": testutil.ToFloat64(deliveriesTotal.WithLabelValues(name)),
	}
	v := Value[int]{Name: name}
	w := v.Watch()
	v.Set(1)
	v.Set(2)
	if _, err := w.Get(ctx(t)); err != nil {
		t.Fatal(err)
	}
	check := func(what string, c prometheus.Collector, want float64) {
		t.Helper()
		if got := testutil.ToFloat64(c) - base[what]; got != want {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	check("sets", setsTotal.WithLabelValues(name), 2)
	check("deliveries", deliveriesTotal.WithLabelValues(name), 1)
	check("watchers", watchersOpen.WithLabelValues(name), 1)
	w.Close()
	check("watchers after Close", watchersOpen.WithLabelValues(name), 0)

	// The registry exposes all three families.
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
	}
	if got := strings.Join(names, ","); got != "polis_event_deliveries_total,polis_event_sets_total,polis_event_watchers" {
		t.Errorf("gathered families %s", got)
	}
}

func TestRangeConformance(t *testing.T) {
	eventtest.RunRange(t, eventtest.RangeBackend{
		New: func(t *testing.T) (func(string, int), func(string), event.RangeWatch[int]) {
			r := &Range[int]{Name: "conformance-range"}
			return r.Put, r.Delete, r
		},
	})
}
