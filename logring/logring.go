// Package logring keeps a node's recent structured log lines in memory, so
// that an operator can read them over the node API from anywhere (a VM has
// no log file to open), and follow them live.
//
// The model. Every line belongs to the logger that wrote it, and every
// runnable of the supervisor tree has its own logger named after its place
// in the tree ("root.roleserve.heartbeat"). The ring keeps a ring buffer of
// a fixed number of lines per logger name, not one for the whole node: a
// chatty runnable overwrites only its own oldest lines, never another's, so
// the last words of a runnable that failed an hour ago are still there next
// to a busy heartbeat. Memory is bounded: at most MaxRunnables rings of
// PerRunnable lines, each line cut to MaxLineBytes (lines of names beyond
// MaxRunnables share one overflow ring).
//
// Reading. Backlog returns the kept lines that match a Filter (a runnable
// prefix, "root.roleserve" meaning that runnable and everything under it, a
// lowest level, a start time), merged across rings in the order they were
// written. Follow returns the same backlog plus a Subscription that receives
// every later matching line, with no gap and no duplicate between the two.
// Any number of subscriptions may be open.
//
// The logger never waits for a reader. Each subscription has a buffer; when
// a slow reader lets it fill, further lines for that reader are dropped and
// counted (Subscription.Dropped), and the reader is expected to say so to
// its own reader (the node API sends the count in the stream). Writing a
// line costs the same whether the subscribers keep up or not.
//
// What it does not do: persist anything (a restarted agent starts empty;
// the process's stderr, or the console in a VM, is the durable record), or
// parse free text (only what zap gives it: level, logger name, message,
// structured fields).
package logring

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap/zapcore"
)

// Defaults of a Ring's limits.
const (
	// DefaultPerRunnable lines are kept per logger name.
	DefaultPerRunnable = 1000
	// DefaultMaxRunnables logger names get a ring of their own.
	DefaultMaxRunnables = 1024
	// DefaultMaxLineBytes bound a line's message and fields together.
	DefaultMaxLineBytes = 8 << 10
	// DefaultSubscriberBuffer lines wait for a slow subscriber before
	// lines are dropped for it.
	DefaultSubscriberBuffer = 1024
)

// OverflowRing is the logger name under which lines of names beyond
// MaxRunnables are kept.
const OverflowRing = "(other)"

// Entry is one log line as kept in the ring.
type Entry struct {
	// Seq numbers the lines of a Ring in the order they were written,
	// from 1; a gap between two lines a follower receives means lines were
	// dropped for it.
	Seq uint64
	// Time is when the line was logged.
	Time time.Time
	// Level is the line's level.
	Level zapcore.Level
	// Logger is the name of the logger that wrote it: the runnable's place
	// in the tree, or "main" and the like for lines from outside the tree.
	Logger string
	// Message is the line's message.
	Message string
	// Fields are the line's structured fields (the logger's own, from With,
	// and the line's), as a JSON object; "{}" when there are none. A stack
	// trace, if the line has one, is the field "stacktrace".
	Fields string
	// Truncated is set when the line was cut to MaxLineBytes.
	Truncated bool
}

// Filter selects lines. The zero Filter selects everything.
type Filter struct {
	// Runnable selects lines of this logger name and every name under it:
	// "root.roleserve" selects root.roleserve and root.roleserve.heartbeat,
	// not root.roleserver. Empty selects every name.
	Runnable string
	// MinLevel is the lowest level selected. The zero value is InfoLevel;
	// use DebugLevel for everything.
	MinLevel zapcore.Level
	// Since, if set, selects lines logged at or after it.
	Since time.Time
}

// Match reports whether f selects e.
func (f Filter) Match(e *Entry) bool {
	return e.Level >= f.MinLevel && UnderRunnable(e.Logger, f.Runnable) && (f.Since.IsZero() || !e.Time.Before(f.Since))
}

// UnderRunnable reports whether the logger name is prefix or below it in the
// tree; every name is under the empty prefix.
func UnderRunnable(name, prefix string) bool {
	if prefix == "" {
		return true
	}
	rest, ok := strings.CutPrefix(name, prefix)
	return ok && (rest == "" || rest[0] == '.')
}

// Config sets a Ring's limits; zero fields take the defaults.
type Config struct {
	// PerRunnable is how many lines are kept per logger name.
	PerRunnable int
	// MaxRunnables is how many logger names get a ring of their own.
	MaxRunnables int
	// MaxLineBytes bounds a line's message plus fields; longer lines are
	// cut and marked Truncated.
	MaxLineBytes int
	// SubscriberBuffer is how many lines may wait for one subscriber.
	SubscriberBuffer int
}

func (c Config) withDefaults() Config {
	if c.PerRunnable <= 0 {
		c.PerRunnable = DefaultPerRunnable
	}
	if c.MaxRunnables <= 0 {
		c.MaxRunnables = DefaultMaxRunnables
	}
	if c.MaxLineBytes <= 0 {
		c.MaxLineBytes = DefaultMaxLineBytes
	}
	if c.SubscriberBuffer <= 0 {
		c.SubscriberBuffer = DefaultSubscriberBuffer
	}
	return c
}

// Ring holds the recent lines of every logger name. Make it with New; it is
// safe for concurrent use. Lines enter through the zap core of Core.
type Ring struct {
	cfg Config

	mu    sync.Mutex
	seq   uint64
	rings map[string]*ring
	subs  map[*Subscription]struct{}
}

// ring is the fixed-size buffer of one logger name.
type ring struct {
	lines []Entry // len grows up to PerRunnable, then wraps
	next  int     // where the next line goes once full
}

// New returns an empty ring.
func New(cfg Config) *Ring {
	return &Ring{cfg: cfg.withDefaults(), rings: map[string]*ring{}, subs: map[*Subscription]struct{}{}}
}

// add stores e (whose Seq it sets) and hands it to the matching
// subscribers without waiting for any.
func (r *Ring) add(e Entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	e.Seq = r.seq
	rg := r.rings[e.Logger]
	if rg == nil {
		name := e.Logger
		if len(r.rings) >= r.cfg.MaxRunnables {
			name = OverflowRing
			rg = r.rings[name]
		}
		if rg == nil {
			rg = &ring{lines: make([]Entry, 0, min(r.cfg.PerRunnable, 64))}
			r.rings[name] = rg
		}
	}
	if len(rg.lines) < r.cfg.PerRunnable {
		rg.lines = append(rg.lines, e)
	} else {
		rg.lines[rg.next] = e
		rg.next = (rg.next + 1) % len(rg.lines)
	}
	for s := range r.subs {
		if !s.filter.Match(&e) {
			continue
		}
		select {
		case s.c <- e:
		default:
			s.dropped.Add(1)
		}
	}
}

// Backlog returns the kept lines that f selects, oldest first.
func (r *Ring) Backlog(f Filter) []Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.backlogLocked(f)
}

func (r *Ring) backlogLocked(f Filter) []Entry {
	var out []Entry
	for name, rg := range r.rings {
		if name != OverflowRing && !UnderRunnable(name, f.Runnable) {
			continue
		}
		for i := range rg.lines {
			if e := &rg.lines[i]; f.Match(e) {
				out = append(out, *e)
			}
		}
	}
	slices.SortFunc(out, func(a, b Entry) int {
		switch {
		case a.Seq < b.Seq:
			return -1
		case a.Seq > b.Seq:
			return 1
		}
		return 0
	})
	return out
}

// Follow returns the backlog Backlog(f) would return and a subscription to
// every later line f selects. Close the subscription when done.
func (r *Ring) Follow(f Filter) ([]Entry, *Subscription) {
	s := &Subscription{ring: r, filter: f, c: make(chan Entry, r.cfg.SubscriberBuffer)}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.subs[s] = struct{}{}
	return r.backlogLocked(f), s
}

// Subscribers is how many subscriptions are open.
func (r *Ring) Subscribers() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.subs)
}

// Subscription receives the lines of a Follow as they are written.
type Subscription struct {
	ring    *Ring
	filter  Filter
	c       chan Entry
	dropped atomic.Uint64
	once    sync.Once
}

// C delivers the lines, in order. It is never closed: select on it with
// the reader's own context.
func (s *Subscription) C() <-chan Entry { return s.c }

// Dropped is how many lines were dropped for this subscription so far
// because its buffer was full.
func (s *Subscription) Dropped() uint64 { return s.dropped.Load() }

// Close ends the subscription; no line is delivered after it returns.
func (s *Subscription) Close() {
	s.once.Do(func() {
		s.ring.mu.Lock()
		defer s.ring.mu.Unlock()
		delete(s.ring.subs, s)
	})
}
