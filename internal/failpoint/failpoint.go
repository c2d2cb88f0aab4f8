// Package failpoint names the points at which the node agent's tests crash
// it: every step of enrolment and every atomic file write calls Inject with
// a name that says where it is, and a test that has installed a hook (Set)
// can stop the agent right there, then start a new one over the same
// storage, as a power cut followed by a reboot would.
//
// The model is the one etcd's gofail gives, without a code generator: the
// points are ordinary function calls that do nothing unless a test set a
// hook. In a production binary nothing sets one, so Inject is one atomic
// load and a nil check. Tests learn which points a run passes by recording
// them (Set with a hook that only records), so a new write or step is
// crashed at without anyone listing it by hand.
//
// A hook that returns an error makes the caller fail with it, and the
// callers do nothing more: the caller's write or step does not happen. A
// hook that wants the agent dead returns an error from every later call as
// well, so that nothing is written after the "crash".
package failpoint

import (
	"sync/atomic"
)

var hook atomic.Pointer[func(name string) error]

// Inject returns the hook's verdict for the point called name, nil when no
// hook is set (always, outside tests).
func Inject(name string) error {
	h := hook.Load()
	if h == nil {
		return nil
	}
	return (*h)(name)
}

// Set installs h, for tests only, and returns the function that removes it.
// The hook is global to the process: a test that sets one must not run in
// parallel with another that does, and h should act only on the points of
// the agent under test (their names start with its storage directory).
func Set(h func(name string) error) (reset func()) {
	hook.Store(&h)
	return func() { hook.Store(nil) }
}
