package event_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/event/memory"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type membership struct{ credentials bool }

func ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// mustNotWake checks that Wait keeps blocking for a short while.
func mustNotWake(t *testing.T, in *event.Inputs) {
	t.Helper()
	quiet, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if why, err := in.Wait(quiet); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait = %v, %v; want it to keep blocking", why, err)
	}
}

// The example from DESIGN.md: wait until membership has credentials and roles
// are known, get both and the reason.
func TestInputsTwoTypes(t *testing.T) {
	mv := memory.Value[membership]{Name: "membership"}
	rv := memory.Value[[]string]{Name: "roles"}
	var in event.Inputs
	defer in.Close()
	m := event.Input(&in, &mv, func(m membership) bool { return m.credentials })
	r := event.Input(&in, &rv, nil)

	mustNotWake(t, &in)
	mv.Set(membership{credentials: false})
	rv.Set([]string{"consensus"})
	mustNotWake(t, &in) // membership fails its predicate

	mv.Set(membership{credentials: true})
	why, err := in.Wait(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := why.String(); got != "membership v0→v2, roles v0→v1" {
		t.Fatalf("why = %q", got)
	}
	if !m.Latest().credentials || len(r.Latest()) != 1 {
		t.Fatalf("Latest = %+v, %v", m.Latest(), r.Latest())
	}
	mustNotWake(t, &in) // nothing changed since

	rv.Set([]string{"consensus", "kubernetes"})
	why, err = in.Wait(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := why.String(); got != "roles v1→v2" || !r.Changed() || m.Changed() {
		t.Fatalf("why = %q", got)
	}
	if len(r.Latest()) != 2 {
		t.Fatalf("roles = %v", r.Latest())
	}

	// A change that breaks a predicate holds the reaction back, and the
	// change is explained once the predicate holds again.
	mv.Set(membership{credentials: false})
	mustNotWake(t, &in)
	if !m.Latest().credentials {
		t.Fatalf("Latest changed between Waits")
	}
	mv.Set(membership{credentials: true})
	why, err = in.Wait(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := why.String(); got != "membership v2→v4" {
		t.Fatalf("why = %q", got)
	}
}

// Wait must wake up when an input changes while it is blocked.
func TestInputsWakeWhileBlocked(t *testing.T) {
	var a memory.Value[int]
	var b memory.Value[string]
	var in event.Inputs
	defer in.Close()
	ai := event.Input(&in, &a, nil)
	bi := event.Input(&in, &b, func(s string) bool { return s == "go" })
	a.Set(1)
	done := make(chan error, 1)
	go func() {
		_, err := in.Wait(ctx(t))
		done <- err
	}()
	b.Set("wait")
	b.Set("go")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if ai.Latest() != 1 || bi.Latest() != "go" {
		t.Fatalf("Latest = %d, %q", ai.Latest(), bi.Latest())
	}
}

// Many inputs go through the general select path.
func TestInputsMany(t *testing.T) {
	const n = 9
	values := make([]memory.Value[int], n)
	var in event.Inputs
	defer in.Close()
	ins := make([]*event.In[int], n)
	for i := range values {
		ins[i] = event.Input(&in, &values[i], func(d int) bool { return d > 0 })
	}
	for i := range values {
		values[i].Set(0)
	}
	done := make(chan error, 1)
	go func() {
		_, err := in.Wait(ctx(t))
		done <- err
	}()
	for i := range values {
		values[i].Set(i + 1)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for i, x := range ins {
		if x.Latest() != i+1 {
			t.Fatalf("input %d = %d", i, x.Latest())
		}
	}
	values[n-1].Set(100)
	why, err := in.Wait(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := why.String(); got != "input8 v2→v3" {
		t.Fatalf("why = %q", got)
	}
}

func TestInputsCloseWakesWait(t *testing.T) {
	var a memory.Value[int]
	var in event.Inputs
	event.Input(&in, &a, nil)
	done := make(chan error, 1)
	go func() {
		_, err := in.Wait(context.Background())
		done <- err
	}()
	in.Close()
	if err := <-done; !errors.Is(err, event.ErrClosed) {
		t.Fatalf("Wait after Close = %v, want ErrClosed", err)
	}
	if err := in.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if info := a.Info(); info.Watchers != 0 {
		t.Fatalf("Close left %d watchers open", info.Watchers)
	}
	if _, err := in.Wait(ctx(t)); !errors.Is(err, event.ErrClosed) {
		t.Fatalf("Wait on closed Inputs = %v", err)
	}
}

func TestInputsContext(t *testing.T) {
	var a memory.Value[int]
	var in event.Inputs
	defer in.Close()
	x := event.Input(&in, &a, nil)
	c, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := in.Wait(c); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with cancelled context = %v", err)
	}
	// Still usable afterwards.
	a.Set(3)
	if _, err := in.Wait(ctx(t)); err != nil || x.Latest() != 3 {
		t.Fatalf("Wait = %v, Latest = %d", err, x.Latest())
	}
}

// brokenWatcher fails every Get, like an etcd value whose decoder rejects
// the stored bytes.
type brokenValue struct{}
type brokenWatcher struct{}

func (brokenValue) Watch() event.Watcher[int] { return brokenWatcher{} }
func (brokenWatcher) Get(context.Context, ...event.GetOption[int]) (int, error) {
	return 0, errBroken
}
func (brokenWatcher) Ready() <-chan struct{} { return event.ClosedChan() }
func (brokenWatcher) Close() error           { return nil }

var errBroken = errors.New("cannot decode")

func TestInputsErrorNamesInput(t *testing.T) {
	var in event.Inputs
	defer in.Close()
	event.Input(&in, brokenValue{}, nil)
	_, err := in.Wait(ctx(t))
	if !errors.Is(err, errBroken) || err.Error() != "input input0: cannot decode" {
		t.Fatalf("Wait = %v", err)
	}
}

// Without Versioned, Inputs counts the updates it saw.
type plainValue struct{ v *memory.Value[int] }
type plainWatcher struct{ w event.Watcher[int] }

func (p plainValue) Watch() event.Watcher[int] { return plainWatcher{p.v.Watch()} }
func (p plainWatcher) Get(ctx context.Context, o ...event.GetOption[int]) (int, error) {
	return p.w.Get(ctx, o...)
}
func (p plainWatcher) Ready() <-chan struct{} { return p.w.Ready() }
func (p plainWatcher) Close() error           { return p.w.Close() }

func TestInputsUnversioned(t *testing.T) {
	var v memory.Value[int]
	var in event.Inputs
	defer in.Close()
	event.Input(&in, plainValue{&v}, nil)
	v.Set(1)
	v.Set(2)
	v.Set(3)
	why, err := in.Wait(ctx(t))
	if err != nil || why.String() != "input0 v0→v1" {
		t.Fatalf("Wait = %v, %v", why, err)
	}
}

func TestGetHelper(t *testing.T) {
	v := memory.Value[int]{Name: "helper"}
	v.Set(1)
	go v.Set(2)
	d, err := event.Get[int](ctx(t), &v, event.Filter(func(d int) bool { return d == 2 }))
	if err != nil || d != 2 {
		t.Fatalf("Get = %d, %v", d, err)
	}
	if v.Info().Watchers != 0 {
		t.Fatalf("Get left its watcher open")
	}
}

// Close may run while another goroutine registers inputs (a worker being
// torn down while it starts): the race detector must stay quiet, and every
// watcher opened must be closed, also those of Inputs registered after
// Close.
func TestInputsInputRacesClose(t *testing.T) {
	for range 50 {
		var v memory.Value[int]
		var in event.Inputs
		done := make(chan struct{})
		go func() {
			defer close(done)
			for range 10 {
				event.Input(&in, &v, nil)
			}
		}()
		in.Close()
		<-done
		if n := v.Info().Watchers; n != 0 {
			t.Fatalf("%d watchers left open after Close", n)
		}
	}
}

func TestInputsInputAfterClose(t *testing.T) {
	v := memory.Value[int]{Name: "late"}
	var in event.Inputs
	in.Close()
	late := event.Input(&in, &v, nil)
	if n := v.Info().Watchers; n != 0 {
		t.Fatalf("an Input after Close opened %d watchers", n)
	}
	if _, err := in.Wait(ctx(t)); !errors.Is(err, event.ErrClosed) {
		t.Fatalf("Wait = %v, want ErrClosed", err)
	}
	if late.Changed() || late.Name() != "late" {
		t.Fatalf("handle of a late input: changed %v, name %q", late.Changed(), late.Name())
	}
}

// Changed on the typed handle answers "did this input change?" without a
// name: renaming the value changes nothing.
func TestInputsChangedHandle(t *testing.T) {
	a := memory.Value[int]{Name: "a"}
	b := memory.Value[string]{Name: "b"}
	var in event.Inputs
	defer in.Close()
	ai := event.Input(&in, &a, nil)
	bi := event.Input(&in, &b, nil)
	a.Set(1)
	b.Set("x")
	if _, err := in.Wait(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if !ai.Changed() || !bi.Changed() {
		t.Fatalf("first Wait: changed %v %v, want both", ai.Changed(), bi.Changed())
	}
	b.Set("y")
	if _, err := in.Wait(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if ai.Changed() || !bi.Changed() {
		t.Fatalf("after b changed: changed %v %v", ai.Changed(), bi.Changed())
	}
}
