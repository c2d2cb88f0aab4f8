package curator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/supervisor"
)

// oncePerTerm runs do once in each leader term of this curator, as a
// supervised runnable's body: when this curator becomes leader, do runs
// with that term's leaderState, bounded by timeout. A term that ends
// under it (ErrNotLeader) is let go, and the next term tries again; any
// other error ends the runnable, what naming what failed, for the
// supervisor to restart it. Work that a new leader must finish or check
// (a recovery's follow-up, ranges for Kubernetes nodes recorded without
// one) is written this way.
func (s *Service) oncePerTerm(ctx context.Context, timeout time.Duration, what string, do func(context.Context, *leaderState) error) error {
	var in event.Inputs
	defer in.Close()
	leader := event.Input(&in, &s.leader, nil)
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	var done *leaderState
	for {
		if _, err := in.Wait(ctx); err != nil {
			return err
		}
		l := leader.Latest()
		if l == nil || l == done {
			continue
		}
		tctx, cancel := context.WithTimeout(ctx, timeout)
		err := do(tctx, l)
		cancel()
		if errors.Is(err, ErrNotLeader) {
			continue
		}
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		done = l
	}
}
