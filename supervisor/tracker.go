package supervisor

import (
	"sync"

	"github.com/polis-os/polis/event"
)

// tracker counts live goroutines of one run of a group: the runnables
// themselves and the keepers of the groups they started. A keeper must not
// restart its group before everything below it is gone, and a WaitGroup
// cannot be waited on in a select next to a warning timer, hence this.
type tracker struct {
	mu   sync.Mutex
	live int
	idle chan struct{} // closed when live drops to zero; nil until asked for
}

func (t *tracker) add() {
	t.mu.Lock()
	t.live++
	t.mu.Unlock()
}

func (t *tracker) done() {
	t.mu.Lock()
	t.live--
	if t.live == 0 && t.idle != nil {
		close(t.idle)
		t.idle = nil
	}
	t.mu.Unlock()
}

// idleChan returns a channel closed once nothing tracked is alive. Callers
// must make sure no add can race with the count reaching zero.
func (t *tracker) idleChan() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.live == 0 {
		return event.ClosedChan()
	}
	if t.idle == nil {
		t.idle = make(chan struct{})
	}
	return t.idle
}
