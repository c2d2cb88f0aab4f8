package roleserve

import (
	"context"
	"testing"
	"time"

	"github.com/polis-os/polis/supervisor"
	"github.com/polis-os/polis/supervisor/supervisortest"
)

// runMember is a member's run: it sends its context (from u.outlive) and
// holds on until that ends.
func runMember(u *memberUsers, memberCtx chan<- context.Context) supervisor.Runnable {
	return func(ctx context.Context) error {
		mctx := u.outlive(ctx)
		memberCtx <- mctx
		<-mctx.Done()
		return mctx.Err()
	}
}

// startMemberAndUser runs, under a supervisor, a "member" whose context
// comes from u.outlive and a "user" held by u whose child ("election"),
// once cancelled, calls stopping with the member's context and returns.
// It returns the member's context and the stop.
func startMemberAndUser(t *testing.T, u *memberUsers, stopping func(member context.Context)) (member context.Context, stop func()) {
	t.Helper()
	memberCtx := make(chan context.Context, 1)
	userStarted := make(chan struct{})
	sup, cancel := supervisortest.HarnessTree(t, func(ctx context.Context) error {
		if err := supervisor.Run(ctx, "member", runMember(u, memberCtx)); err != nil {
			return err
		}
		mctx := <-memberCtx
		if err := supervisor.Run(ctx, "user", u.hold(func(ctx context.Context) error {
			if err := supervisor.Run(ctx, "election", func(ctx context.Context) error {
				close(userStarted)
				<-ctx.Done()
				stopping(mctx) // the lease's revocation, which needs the member
				return ctx.Err()
			}); err != nil {
				return err
			}
			<-ctx.Done()
			return ctx.Err()
		})); err != nil {
			return err
		}
		memberCtx <- mctx
		<-ctx.Done()
		return ctx.Err()
	})
	<-userStarted
	return <-memberCtx, func() { cancel(); sup.Wait() }
}

// The member's context ends after the user's whole subtree has ended, not
// when the control plane stops: the user's child, stopping, still finds
// the member running.
func TestMemberOutlivesItsUsers(t *testing.T) {
	u := &memberUsers{grace: time.Hour}
	var aliveWhileStopping bool
	member, stop := startMemberAndUser(t, u, func(member context.Context) {
		aliveWhileStopping = member.Err() == nil
	})
	stop() // returns once every runnable has returned, the member too
	if !aliveWhileStopping {
		t.Error("the member's context had ended while its user was still stopping")
	}
	if member.Err() == nil {
		t.Error("the member's context did not end once its user had stopped")
	}
}

// A user that does not stop keeps the member no longer than the grace.
func TestMemberGraceBounded(t *testing.T) {
	u := &memberUsers{grace: 100 * time.Millisecond}
	member, stop := startMemberAndUser(t, u, func(member context.Context) {
		// Hangs until the member gave up waiting.
		<-member.Done()
	})
	stop()
	if member.Err() == nil {
		t.Error("the member's context did not end")
	}
}

// Without users, the member stops with the control plane.
func TestMemberWithoutUsersStopsAtOnce(t *testing.T) {
	u := &memberUsers{grace: time.Hour}
	memberCtx := make(chan context.Context, 1)
	sup, stop := supervisortest.HarnessTree(t, func(ctx context.Context) error {
		if err := supervisor.Run(ctx, "member", runMember(u, memberCtx)); err != nil {
			return err
		}
		<-ctx.Done()
		return ctx.Err()
	})
	mctx := <-memberCtx
	// With an hour of grace, only "no user runs" can end it before the
	// test's deadline.
	stop()
	sup.Wait()
	if mctx.Err() == nil {
		t.Error("the member's context did not end with the control plane although nothing used it")
	}
}
