package supervisor

import (
	"context"
	"fmt"
	"slices"

	"go.uber.org/zap"
)

// Cleanup registers f to run once the runnable that owns ctx has returned
// and every runnable of its subtree has returned too: the point where
// nothing the runnable started can still use what it hands its children.
//
// A deferred call in the runnable is too early for that: defers run when the
// runnable returns, while its children are still being cancelled. A runnable
// that opens a connection and passes it to children therefore closes it with
// Cleanup, not defer.
//
// Cleanups run in the reverse order of registration, on the supervisor's
// goroutine for the runnable, before it is restarted (or, for a group,
// once the whole group and its subtrees have returned). A Cleanup
// registered by a leftover goroutine after that point runs at once. Like
// Signal, Cleanup panics for a context that belongs to no runnable.
func Cleanup(ctx context.Context, f func()) {
	r := runFrom(ctx)
	if r == nil {
		panic("supervisor: Cleanup called with a context that does not belong to a supervised runnable")
	}
	s := r.node.sup
	s.mu.Lock()
	if r.cleanedUp {
		s.mu.Unlock()
		f()
		return
	}
	r.cleanups = append(r.cleanups, f)
	s.mu.Unlock()
}

// runCleanups runs the cleanups of runs, whose goroutines and subtrees have
// all returned. A panicking cleanup is logged and does not stop the others.
func (g *group) runCleanups(runs []*run) {
	s := g.sup
	for _, r := range runs {
		s.mu.Lock()
		fs := r.cleanups
		r.cleanups, r.cleanedUp = nil, true
		s.mu.Unlock()
		for _, f := range slices.Backward(fs) {
			func() {
				defer func() {
					if v := recover(); v != nil {
						r.node.logger.Error("cleanup panicked", zap.String("panic", fmt.Sprint(v)))
					}
				}()
				f()
			}()
		}
	}
}
