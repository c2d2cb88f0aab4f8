package memory_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/event/memory"
)

// A Value holds the current state of something, not a queue of changes to
// it. The producer Sets whenever the state changes and never waits for
// anybody; a consumer Watches it and, with each Get, catches up with the
// newest state. That is what a consumer of "who is the leader" wants: it
// must act on the leader of now, and the leaders it was too busy to see in
// between are of no use to it.
func ExampleValue() {
	ctx := context.Background()

	// The zero Value is unset and ready to use. Name labels it in logs,
	// metrics and the explanations of event.Inputs.
	leader := memory.Value[string]{Name: "leader"}

	// Set never blocks on consumers, so the producer can publish before
	// anybody watches, and a slow consumer cannot hold it up.
	leader.Set("node-a")
	leader.Set("node-b")

	// Every consumer takes a watcher of its own: its private cursor into
	// the value. (In a function, defer w.Close() right after Watch.)
	w := leader.Watch()

	// The first Get returns the current data at once. A consumer that
	// starts late catches up with the state instead of replaying its
	// history: it never sees node-a.
	l, err := w.Get(ctx)
	fmt.Println("first Get:", l, err)

	// Every later Get blocks until the value is Set again, here by a
	// producer in another goroutine, and returns the new data.
	set := make(chan struct{})
	go func() {
		defer close(set)
		leader.Set("node-c")
	}()
	l, err = w.Get(ctx)
	fmt.Println("after one Set:", l, err)
	<-set

	// Updates made while the consumer is busy elsewhere are not queued for
	// it: its next Get returns the newest data and skips node-d. What is
	// guaranteed is that a change is never missed, not that every
	// intermediate state is seen; a consumer that needs every update needs
	// a queue, not a value.
	leader.Set("node-d")
	leader.Set("node-e")
	l, err = w.Get(ctx)
	fmt.Println("after two Sets:", l, err)

	// Close releases the watcher: the value stops counting it, and Get on
	// it, including a Get blocked in another goroutine, returns
	// event.ErrClosed. Closing again is harmless.
	w.Close()
	fmt.Println("watchers left:", leader.Info().Watchers)
	_, err = w.Get(ctx)
	fmt.Println("Get after Close:", errors.Is(err, event.ErrClosed))

	// Output:
	// first Get: node-b <nil>
	// after one Set: node-c <nil>
	// after two Sets: node-e <nil>
	// watchers left: 0
	// Get after Close: true
}

// A consumer usually runs in a goroutine of its own, owns its watcher, and
// loops on Get until its context ends. It needs no channel from the
// producer and no buffer size, and ending it takes nothing but cancelling
// its context: the Get it is blocked in returns the context's error.
//
// The channels below only hand what the consumer saw to the example, so
// that its output comes out in a fixed order; they are not part of the
// pattern.
func ExampleValue_Watch() {
	var status memory.Value[string]
	ctx, cancel := context.WithCancel(context.Background())
	seen := make(chan string)
	stopped := make(chan error)

	consume := func(ctx context.Context) error {
		w := status.Watch()
		defer w.Close()
		for {
			s, err := w.Get(ctx)
			if err != nil {
				return err
			}
			seen <- s
		}
	}
	go func() { stopped <- consume(ctx) }()

	status.Set("starting")
	fmt.Println(<-seen)
	status.Set("serving")
	fmt.Println(<-seen)

	cancel()
	fmt.Println("consumer stopped:", <-stopped)
	fmt.Println("watchers left:", status.Info().Watchers)

	// Output:
	// starting
	// serving
	// consumer stopped: context canceled
	// watchers left: 0
}

// With Equal set, a Set whose data equals the current data is dropped: no
// new version, nobody woken. That lets a producer publish unconditionally,
// say after every periodic check, without making every consumer react to
// news that is no news.
func ExampleValue_equal() {
	ctx := context.Background()
	// Name and Equal configure the value: set them before sharing it.
	health := memory.Value[string]{Name: "health", Equal: memory.Equal[string]}
	w := health.Watch()
	defer w.Close()

	health.Set("ok")
	health.Set("ok")
	health.Set("ok")
	fmt.Println("version after three equal Sets:", health.Info().Version)

	h, _ := w.Get(ctx)
	fmt.Println(h)
	// The next Get wakes for the change only, not for the repeated "ok".
	health.Set("ok")
	health.Set("degraded")
	h, _ = w.Get(ctx)
	fmt.Println(h, "at version", health.Info().Version)

	// Output:
	// version after three equal Sets: 1
	// ok
	// degraded at version 2
}
