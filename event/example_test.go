package event_test

import (
	"context"
	"fmt"
	"slices"

	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/event/memory"
)

// When a function needs a value once, to answer a request or print a
// status, event.Get spares it the Watch and Close bookkeeping: it returns
// the current data, waiting for the first Set while the value is unset, and
// closes the watcher it used, so nothing is left open.
func ExampleGet() {
	ctx := context.Background()
	var address memory.Value[string]

	// The value is unset until a producer in another goroutine Sets it;
	// Get waits for that instead of returning an empty address.
	set := make(chan struct{})
	go func() {
		defer close(set)
		address.Set("10.0.0.7")
	}()
	a, err := event.Get(ctx, &address)
	fmt.Println(a, err)
	<-set

	// Once set, Get returns at once, every time, with the current data.
	a, err = event.Get(ctx, &address)
	fmt.Println(a, err)
	fmt.Println("watchers left:", address.Info().Watchers)

	// Output:
	// 10.0.0.7 <nil>
	// 10.0.0.7 <nil>
	// watchers left: 0
}

// Filter makes Get wait for the data one needs rather than for the next
// change. Because a value may skip intermediate data, "wait until the Set
// after the one I saw" is not something a consumer can count on; "wait
// until the data says what I need" is, and it holds however many updates
// the consumer missed. Here a worker waits until the cluster has three
// members while they join one by one.
func ExampleFilter() {
	ctx := context.Background()
	members := memory.Value[[]string]{Name: "members"}

	joined := make(chan struct{})
	go func() {
		defer close(joined)
		var m []string
		for _, name := range []string{"node-a", "node-b", "node-c"} {
			// Consumers share the slice a Set hands them, so the data
			// must never change once Set: each update is a new slice.
			m = append(slices.Clone(m), name)
			members.Set(m)
		}
	}()

	// Get with a Filter skips data that fails the predicate, however much
	// of it there is, and returns the first that passes. With a watcher
	// of one's own, the data skipped is consumed: a later Get without the
	// filter will not return it either.
	m, err := event.Get(ctx, &members, event.Filter(func(m []string) bool {
		return len(m) >= 3
	}))
	fmt.Println(m, err)
	<-joined

	// Output:
	// [node-a node-b node-c] <nil>
}

// Inputs is how a worker reacts to a combination of values: "once the node
// has credentials and its roles are known, do X". Each value is registered
// once with the condition it must meet, and Wait returns when all of them
// meet it and at least one has changed since the previous Wait, with Why:
// which inputs changed, from which version to which. Logging Why tells an
// operator what each reaction was a reaction to.
//
// Latest stays as it was at the Wait that returned, so the data a worker
// acts on is exactly the data Why explains, even while producers keep
// Setting.
func ExampleInputs() {
	ctx := context.Background()
	type membership struct{ credentials bool }
	// Named values are named in Why; unnamed ones are "input0", "input1"...
	mv := memory.Value[membership]{Name: "membership"}
	rv := memory.Value[[]string]{Name: "roles"}

	// The zero Inputs is ready to use. Close closes the watchers of every
	// input; it may also be called from another goroutine to wake a
	// blocked Wait, which then returns event.ErrClosed.
	var in event.Inputs
	defer in.Close()
	m := event.Input(&in, &mv, func(m membership) bool { return m.credentials })
	r := event.Input(&in, &rv, nil) // nil: any data will do, once there is some

	// The producers run elsewhere. Until membership has credentials,
	// Wait keeps blocking, however often the inputs change.
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		rv.Set([]string{"consensus"})
		mv.Set(membership{credentials: false})
		mv.Set(membership{credentials: true})
	}()
	why, err := in.Wait(ctx)
	<-produced
	if err != nil {
		fmt.Println(err)
		return
	}
	// On the first wake-up every input counts as changed, from v0.
	fmt.Println("woke because:", why)
	fmt.Println("credentials:", m.Latest().credentials, "roles:", r.Latest())

	// A later Wait returns only once something changed again. The handles
	// say which input did, so a worker can redo only what depends on it.
	rv.Set([]string{"consensus", "kubernetes"})
	why, err = in.Wait(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("woke because:", why)
	fmt.Println("roles changed:", r.Changed(), "membership changed:", m.Changed())
	fmt.Println("roles:", r.Latest())

	// Output:
	// woke because: membership v0→v2, roles v0→v1
	// credentials: true roles: [consensus]
	// woke because: roles v1→v2
	// roles changed: true membership changed: false
	// roles: [consensus kubernetes]
}
