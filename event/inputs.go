package event

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
)

// Inputs waits on several event values of any types at once, without a
// goroutine per value. A worker registers each value once, with the predicate
// it must satisfy, and then calls Wait in its loop:
//
//	var in event.Inputs
//	defer in.Close()
//	membership := event.Input(&in, w.membership, hasCredentials)
//	roles := event.Input(&in, w.roles, nil)
//	for {
//		why, err := in.Wait(ctx)
//		if err != nil {
//			return err
//		}
//		logger.Info("reacting", zap.Stringer("because", why))
//		m, r := membership.Latest(), roles.Latest()
//		...
//	}
//
// Wait returns once every input has data that satisfies its predicate and at
// least one input has changed since the previous Wait (the first Wait returns
// as soon as all predicates hold). Latest then returns, for each input, the
// newest data seen, which satisfies the predicate. Between Waits, Latest does
// not change, so the data a worker acts on is exactly what Why explains.
//
// To react to one input in particular, ask its handle: after a Wait,
// [In.Changed] reports whether that input is among the changes. The handle
// is typed, so renaming a value cannot silently break the question.
//
// The zero Inputs is ready to use. Inputs is meant for one goroutine: Input
// and Wait must not be called concurrently with Wait. Close may be called from
// any goroutine, also while Input or Wait runs, and wakes a blocked Wait. An
// Input registered after Close watches nothing: its value is not watched at
// all, so nothing is left open.
type Inputs struct {
	waited bool
	busy   bool
	chans  []<-chan struct{} // Wait's select list, kept between Waits

	mu     sync.Mutex // guards inputs (appends), closed and done
	inputs []input
	closed bool
	done   chan struct{}
}

// input is the type-erased view Inputs has of an In[T].
type input interface {
	inputName() string
	ready() <-chan struct{}
	// refresh fetches newer data if the watcher has some, without blocking.
	refresh(ctx context.Context) error
	satisfied() bool
	// changedSinceMark reports whether data newer than the last mark arrived.
	changedSinceMark() bool
	// mark records the current version as reported and says what changed.
	mark() (Change, bool)
	close()
}

// In is one input registered with Inputs.
type In[T any] struct {
	name string
	w    Watcher[T]
	pred func(T) bool

	changed  bool // the last Wait that returned reported this input
	has      bool // data has been received
	data     T
	version  uint64 // version of data
	reported uint64 // version when Wait last returned
	latest   T      // data when Wait last returned
	count    uint64 // local update count, for watchers that are not Versioned
}

// Input registers v with in. Wait will not return until v has data for which
// pred returns true; a nil pred accepts any data. The value's name (from
// Describer) labels it in Why; unnamed values are called "input<N>".
func Input[T any](in *Inputs, v ValueWatch[T], pred func(T) bool) *In[T] {
	name := ""
	if d, ok := v.(Describer); ok {
		name = d.Info().Name
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if name == "" {
		name = "input" + strconv.Itoa(len(in.inputs))
	}
	i := &In[T]{name: name, pred: pred}
	if in.closed {
		// Watching now would open a watcher that nothing closes (with
		// etcd, a goroutine and a watch): the handle stays empty, and
		// Wait returns ErrClosed anyway.
		i.w = closedWatcher[T]{}
		return i
	}
	i.w = v.Watch()
	in.inputs = append(in.inputs, i)
	return i
}

// Latest returns the input's data as of the last Wait that returned
// successfully. Before that it returns the zero value.
func (i *In[T]) Latest() T { return i.latest }

// Changed reports whether this input is among the changes the last Wait
// that returned explained: its data is newer than at the Wait before (or
// it is the first Wait). It is how a worker reacts to one input in
// particular.
func (i *In[T]) Changed() bool { return i.changed }

// Name is the input's name in Why.
func (i *In[T]) Name() string { return i.name }

// closedWatcher stands in for the watcher of an Input registered after
// Close.
type closedWatcher[T any] struct{}

func (closedWatcher[T]) Get(context.Context, ...GetOption[T]) (T, error) {
	var zero T
	return zero, ErrClosed
}
func (closedWatcher[T]) Ready() <-chan struct{} { return closedChan }
func (closedWatcher[T]) Close() error           { return nil }

func (i *In[T]) inputName() string      { return i.name }
func (i *In[T]) ready() <-chan struct{} { return i.w.Ready() }
func (i *In[T]) satisfied() bool        { return i.has && (i.pred == nil || i.pred(i.data)) }
func (i *In[T]) close()                 { i.w.Close() }

func (i *In[T]) refresh(ctx context.Context) error {
	select {
	case <-i.w.Ready():
	default:
		return nil
	}
	d, err := i.w.Get(ctx)
	if err != nil {
		return fmt.Errorf("input %s: %w", i.name, err)
	}
	i.has, i.data = true, d
	i.count++
	if v, ok := i.w.(Versioned); ok {
		i.version = v.LastVersion()
	} else {
		i.version = i.count
	}
	return nil
}

func (i *In[T]) mark() (Change, bool) {
	c := Change{Name: i.name, From: i.reported, To: i.version}
	i.reported, i.latest = i.version, i.data
	i.changed = c.From != c.To
	return c, i.changed
}

// Why explains a wake-up: which inputs changed, and their versions.
type Why struct {
	// Changes lists the inputs whose version differs from the previous Wait,
	// in registration order.
	Changes []Change
}

// Change is one input's move from one version to another. From is 0 on the
// first wake-up.
type Change struct {
	Name     string
	From, To uint64
}

// String renders the explanation for logs, e.g. "roles v7→v8, membership
// v2→v3".
func (w Why) String() string {
	var b strings.Builder
	for n, c := range w.Changes {
		if n > 0 {
			b.WriteString(", ")
		}
		b.WriteString(c.Name)
		b.WriteString(" v")
		b.WriteString(strconv.FormatUint(c.From, 10))
		b.WriteString("→v")
		b.WriteString(strconv.FormatUint(c.To, 10))
	}
	return b.String()
}

// Wait blocks until every input satisfies its predicate and at least one of
// them changed since the previous Wait, then explains why it returned. It
// returns ctx's error when ctx is done, ErrClosed after Close, and the error
// of an input's watcher (wrapped with the input's name) if one fails.
func (in *Inputs) Wait(ctx context.Context) (Why, error) {
	if in.busy {
		return Why{}, ErrConcurrentGet
	}
	in.busy = true
	defer func() { in.busy = false }()
	done, inputs, err := in.doneChan()
	if err != nil {
		return Why{}, err
	}
	// Reused from Wait to Wait: waiting allocates nothing of its own.
	if cap(in.chans) < len(inputs)+2 {
		in.chans = make([]<-chan struct{}, len(inputs)+2)
	}
	chans := in.chans[:len(inputs)+2]
	defer clear(chans)
	for {
		all := true
		for _, i := range inputs {
			if err := i.refresh(ctx); err != nil {
				return Why{}, err
			}
			all = all && i.satisfied()
		}
		if all && (changed(inputs) || !in.waited) {
			in.waited = true
			var why Why
			for _, i := range inputs {
				if c, ok := i.mark(); ok {
					why.Changes = append(why.Changes, c)
				}
			}
			return why, nil
		}
		chans[0], chans[1] = ctx.Done(), done
		for n, i := range inputs {
			chans[n+2] = i.ready()
		}
		selectAny(chans)
		if ctx.Err() != nil {
			return Why{}, ctx.Err()
		}
		if in.isClosed() {
			return Why{}, ErrClosed
		}
	}
}

func changed(inputs []input) bool {
	for _, i := range inputs {
		if i.changedSinceMark() {
			return true
		}
	}
	return false
}

func (i *In[T]) changedSinceMark() bool { return i.version != i.reported }

// Close closes the watchers of all inputs and wakes a blocked Wait. It is
// safe to call more than once and from any goroutine.
func (in *Inputs) Close() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return nil
	}
	in.closed = true
	if in.done != nil {
		close(in.done)
	}
	for _, i := range in.inputs {
		i.close()
	}
	return nil
}

// doneChan returns the channel Close closes and the inputs registered so
// far, or ErrClosed.
func (in *Inputs) doneChan() (<-chan struct{}, []input, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return nil, nil, ErrClosed
	}
	if in.done == nil {
		in.done = make(chan struct{})
	}
	return in.done, in.inputs[:len(in.inputs):len(in.inputs)], nil
}

func (in *Inputs) isClosed() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.closed
}

// selectAny blocks until one of chans is closed or receives. A nil channel is
// never ready. Up to selectDirect channels are waited on by one select
// statement, the slots past len(chans) left nil (the runtime drops nil
// cases before it locks anything), so that a wait on a few inputs does not
// go through reflection.
func selectAny(chans []<-chan struct{}) {
	if len(chans) > selectDirect {
		cases := make([]reflect.SelectCase, len(chans))
		for n, c := range chans {
			cases[n] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(c)}
		}
		reflect.Select(cases)
		return
	}
	var c [selectDirect]<-chan struct{}
	copy(c[:], chans)
	select {
	case <-c[0]:
	case <-c[1]:
	case <-c[2]:
	case <-c[3]:
	case <-c[4]:
	case <-c[5]:
	}
}

// selectDirect is how many channels selectAny waits on without reflection:
// the context, the inputs' set, and four inputs.
const selectDirect = 6
