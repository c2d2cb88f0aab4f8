package supervisor

import (
	"time"

	"github.com/cenkalti/backoff/v5"
	"go.uber.org/zap"
)

// Defaults used when the matching option is not given.
const (
	// DefaultBackoffReset is how long a runnable must have been healthy before
	// a failure counts as a fresh incident rather than part of a crash loop.
	// It is longer than the default backoff ceiling, so a runnable that dies a
	// few seconds after every restart keeps backing off.
	DefaultBackoffReset = 2 * time.Minute
	// DefaultExitWarning is how long a cancelled runnable may take to return
	// before the supervisor starts warning about it. Runnables are expected to
	// watch their context; a few seconds is generous.
	DefaultExitWarning = 5 * time.Second
)

// Option configures a Supervisor. Options are applied in order, so a later
// option overrides an earlier one.
type Option func(*config)

type config struct {
	logger       *zap.Logger
	newBackoff   func() backoff.BackOff
	backoffReset time.Duration
	exitWarning  time.Duration
}

func newConfig(opts []Option) config {
	c := config{
		logger:       zap.NewNop(),
		newBackoff:   defaultBackoff,
		backoffReset: DefaultBackoffReset,
		exitWarning:  DefaultExitWarning,
	}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// defaultBackoff is cenkalti's exponential policy with its defaults: 500ms
// growing by 1.5 up to one minute, randomised by ±50% so that runnables that
// failed together do not retry in lockstep.
func defaultBackoff() backoff.BackOff { return backoff.NewExponentialBackOff() }

// WithLogger sets the logger every runnable's logger derives from. Without it
// the supervisor logs nothing: a library must not pick an output for its
// program, so production code should always pass one.
func WithLogger(l *zap.Logger) Option {
	return func(c *config) {
		if l != nil {
			c.logger = l
		}
	}
}

// WithBackoff sets the restart policy. newBackoff is called once per
// restart unit (a runnable, or a group) because backoff policies are stateful
// and not safe for concurrent use. A policy whose NextBackOff returns
// backoff.Stop makes the supervisor give up: the unit stays failed and is not
// restarted until its parent restarts. Tests typically pass a
// backoff.ZeroBackOff or a short backoff.ConstantBackOff.
func WithBackoff(newBackoff func() backoff.BackOff) Option {
	return func(c *config) {
		if newBackoff != nil {
			c.newBackoff = newBackoff
		}
	}
}

// WithBackoffReset sets how long a runnable must have stayed healthy for its
// next failure to start the backoff from scratch (see DefaultBackoffReset).
// Zero means every failure of a runnable that signalled healthy resets it.
func WithBackoffReset(d time.Duration) Option {
	return func(c *config) { c.backoffReset = d }
}

// WithExitWarning sets how long a cancelled runnable may take to return
// before a warning is logged (and then again after every further d). A
// non-positive d disables the warning.
func WithExitWarning(d time.Duration) Option {
	return func(c *config) { c.exitWarning = d }
}
