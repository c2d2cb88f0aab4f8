package supervisor

import (
	"errors"
	"fmt"
)

// Errors returned by Run and RunGroup, and recorded as failure causes. They
// are always wrapped with the names involved; test them with errors.Is.
var (
	// ErrNotSupervised means the context does not belong to a runnable of any
	// supervisor, so there is no node to attach children to.
	ErrNotSupervised = errors.New("context does not belong to a supervised runnable")
	// ErrInvalidName means a name is empty or uses characters other than
	// [a-z0-9_-]. Dots are excluded because they separate the levels of
	// dotted names.
	ErrInvalidName = errors.New("invalid runnable name (want non-empty [a-z0-9_-])")
	// ErrDuplicateName means the calling runnable already has a child of
	// that name in its current run.
	ErrDuplicateName = errors.New("a sibling with this name already exists")
	// ErrNotRunning means the calling runnable can no longer start children:
	// its context (or the one passed) is cancelled, or it has returned.
	ErrNotRunning = errors.New("calling runnable is cancelled or has returned")
	// ErrReturnedWithoutDone is the failure recorded for a runnable that
	// returned nil without signalling SignalDone: a runnable that stops
	// silently is indistinguishable from one that lost track of its work.
	ErrReturnedWithoutDone = errors.New("returned nil without signalling Done")
	// ErrGoexit is the failure recorded for a runnable that ended through
	// runtime.Goexit, typically t.FailNow called from a test runnable.
	ErrGoexit = errors.New("exited through runtime.Goexit")
)

// panicError is the failure recorded for a runnable that panicked. The stack
// is kept apart from the message so that the tree state stays one line per
// node while the log gets the full trace.
type panicError struct {
	value any
	stack []byte
}

func (p *panicError) Error() string { return fmt.Sprintf("panic: %v", p.value) }

// Unwrap exposes a panicked error value to errors.Is and errors.As.
func (p *panicError) Unwrap() error {
	err, _ := p.value.(error)
	return err
}
