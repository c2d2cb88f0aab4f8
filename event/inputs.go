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
// The zero Inputs is ready to use. Inputs is meant for one goroutine: Input
// and Wait must not be called concurrently with Wait. Close may be called from
// any goroutine and wakes a blocked Wait.
type Inputs struct {
	inputs []input
	waited bool
	busy   bool

	mu     sync.Mutex // guards closed and done
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
	if name == "" {
		name = "input" + strconv.Itoa(len(in.inputs))
	}
	i := &In[T]{name: name, w: v.Watch(), pred: pred}
	in.inputs = append(in.inputs, i)
	return i
}

// Latest returns the input's data as of the last Wait that returned
// successfully. Before that it returns the zero value.
func (i *In[T]) Latest() T { return i.latest }

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
	return c, c.From != c.To
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

// Changed reports whether the named input is among the changes.
func (w Why) Changed(name string) bool {
	for _, c := range w.Changes {
		if c.Name == name {
			return true
		}
	}
	return false
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
	done, err := in.doneChan()
	if err != nil {
		return Why{}, err
	}
	chans := make([]<-chan struct{}, len(in.inputs)+2)
	for {
		all := true
		for _, i := range in.inputs {
			if err := i.refresh(ctx); err != nil {
				return Why{}, err
			}
			all = all && i.satisfied()
		}
		if all && (in.changed() || !in.waited) {
			in.waited = true
			var why Why
			for _, i := range in.inputs {
				if c, ok := i.mark(); ok {
					why.Changes = append(why.Changes, c)
				}
			}
			return why, nil
		}
		chans[0], chans[1] = ctx.Done(), done
		for n, i := range in.inputs {
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

func (in *Inputs) changed() bool {
	for _, i := range in.inputs {
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

func (in *Inputs) doneChan() (<-chan struct{}, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return nil, ErrClosed
	}
	if in.done == nil {
		in.done = make(chan struct{})
	}
	return in.done, nil
}

func (in *Inputs) isClosed() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.closed
}

// selectAny blocks until one of chans is closed or receives. A nil channel is
// never ready. The common sizes are written out so that a wait on a few
// inputs does not go through reflection.
func selectAny(chans []<-chan struct{}) {
	switch len(chans) {
	case 2:
		select {
		case <-chans[0]:
		case <-chans[1]:
		}
	case 3:
		select {
		case <-chans[0]:
		case <-chans[1]:
		case <-chans[2]:
		}
	case 4:
		select {
		case <-chans[0]:
		case <-chans[1]:
		case <-chans[2]:
		case <-chans[3]:
		}
	case 5:
		select {
		case <-chans[0]:
		case <-chans[1]:
		case <-chans[2]:
		case <-chans[3]:
		case <-chans[4]:
		}
	case 6:
		select {
		case <-chans[0]:
		case <-chans[1]:
		case <-chans[2]:
		case <-chans[3]:
		case <-chans[4]:
		case <-chans[5]:
		}
	default:
		cases := make([]reflect.SelectCase, len(chans))
		for n, c := range chans {
			cases[n] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(c)}
		}
		reflect.Select(cases)
	}
}
