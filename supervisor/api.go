package supervisor

// API SKETCH — placeholder bodies; the supervisor helper replaces this file
// with the real implementation (same exported signatures).

import (
	"context"
	"testing"

	"go.uber.org/zap"

	"github.com/polis-os/polis/event"
)

// Runnable is a unit of work run and restarted by the supervisor.
type Runnable func(ctx context.Context) error

// SignalType is what a runnable tells its supervisor about itself.
type SignalType int

const (
	// SignalHealthy: the runnable has started its work.
	SignalHealthy SignalType = iota
	// SignalDone: the runnable has nothing more to do and will return nil.
	SignalDone
)

// Run starts a child runnable of the runnable that owns ctx.
func Run(ctx context.Context, name string, r Runnable) error { panic("todo") }

// RunGroup starts runnables that are restarted together.
func RunGroup(ctx context.Context, runnables map[string]Runnable) error { panic("todo") }

// Signal reports the state of the runnable that owns ctx.
func Signal(ctx context.Context, s SignalType) { panic("todo") }

// Logger returns the logger of the runnable that owns ctx, named after its
// place in the tree (root.a.b).
func Logger(ctx context.Context) *zap.Logger { return zap.NewNop() }

// Option configures a Supervisor.
type Option func(*config)

type config struct{ logger *zap.Logger }

// WithLogger sets the root logger.
func WithLogger(l *zap.Logger) Option { return func(c *config) { c.logger = l } }

// Supervisor is the handle of a running tree.
type Supervisor struct{}

// New starts root under a new supervisor. Cancel ctx to stop the tree.
func New(ctx context.Context, root Runnable, opts ...Option) *Supervisor { panic("todo") }

// Wait blocks until every runnable of the tree has exited after ctx was
// cancelled.
func (s *Supervisor) Wait() { panic("todo") }

// Tree is the state of the whole tree, as an event value.
func (s *Supervisor) Tree() event.ValueWatch[TreeState] { panic("todo") }

// TreeState is a snapshot of the tree.
type TreeState struct{}

// TestHarness runs r under a supervisor for the duration of test t; the tree
// is cancelled and waited for when the test ends.
func TestHarness(t testing.TB, r Runnable) (cancel func()) { panic("todo") }
