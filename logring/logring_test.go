package logring

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newLogger(r *Ring) *zap.Logger {
	return zap.New(r.Core(zapcore.DebugLevel))
}

func messages(es []Entry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Logger+": "+e.Message)
	}
	return out
}

func TestBacklogKeepsLinesPerRunnable(t *testing.T) {
	r := New(Config{PerRunnable: 3})
	l := newLogger(r)
	quiet := l.Named("root").Named("quiet")
	chatty := l.Named("root").Named("chatty")
	quiet.Info("last words")
	for i := range 100 {
		chatty.Info(fmt.Sprint("line ", i))
	}
	got := messages(r.Backlog(Filter{}))
	want := []string{"root.quiet: last words", "root.chatty: line 97", "root.chatty: line 98", "root.chatty: line 99"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("backlog:\n got %q\nwant %q", got, want)
	}
}

func TestFilter(t *testing.T) {
	r := New(Config{})
	l := newLogger(r)
	rs := l.Named("root").Named("roleserve")
	rs.Info("rs")
	rs.Named("heartbeat").Debug("hb debug")
	rs.Named("heartbeat").Warn("hb warn")
	l.Named("root").Named("roleserver").Info("not under roleserve")
	l.Named("main").Error("main")

	for _, tc := range []struct {
		f    Filter
		want string
	}{
		{Filter{MinLevel: zapcore.DebugLevel}, "root.roleserve: rs|root.roleserve.heartbeat: hb debug|root.roleserve.heartbeat: hb warn|root.roleserver: not under roleserve|main: main"},
		{Filter{}, "root.roleserve: rs|root.roleserve.heartbeat: hb warn|root.roleserver: not under roleserve|main: main"},
		{Filter{Runnable: "root.roleserve", MinLevel: zapcore.DebugLevel}, "root.roleserve: rs|root.roleserve.heartbeat: hb debug|root.roleserve.heartbeat: hb warn"},
		{Filter{Runnable: "root.roleserve.heartbeat"}, "root.roleserve.heartbeat: hb warn"},
		{Filter{MinLevel: zapcore.WarnLevel}, "root.roleserve.heartbeat: hb warn|main: main"},
		{Filter{Since: time.Now().Add(time.Hour)}, ""},
	} {
		if got := strings.Join(messages(r.Backlog(tc.f)), "|"); got != tc.want {
			t.Errorf("Backlog(%+v):\n got %q\nwant %q", tc.f, got, tc.want)
		}
	}
}

func TestFields(t *testing.T) {
	r := New(Config{})
	l := newLogger(r).Named("w").With(zap.String("worker", "heartbeat"))
	l.Info("reacting", zap.Int("version", 7), zap.Duration("after", time.Second))
	es := r.Backlog(Filter{})
	if len(es) != 1 {
		t.Fatalf("%d lines, want 1", len(es))
	}
	var fields map[string]any
	if err := json.Unmarshal([]byte(es[0].Fields), &fields); err != nil {
		t.Fatalf("fields %q: %v", es[0].Fields, err)
	}
	if fields["worker"] != "heartbeat" || fields["version"] != 7.0 || fields["after"] != "1s" || len(fields) != 3 {
		t.Errorf("fields = %v", fields)
	}
	if es[0].Seq != 1 || es[0].Level != zapcore.InfoLevel || es[0].Time.IsZero() {
		t.Errorf("entry = %+v", es[0])
	}
}

func TestLongLinesAreCut(t *testing.T) {
	r := New(Config{MaxLineBytes: 100})
	newLogger(r).Info(strings.Repeat("é", 100), zap.String("big", strings.Repeat("x", 1000)))
	e := r.Backlog(Filter{})[0]
	if !e.Truncated || len(e.Message) > 100 || e.Fields != "{}" || !strings.HasPrefix(e.Message, "éé") {
		t.Errorf("entry = %+v", e)
	}
	if !json.Valid([]byte(`"`+e.Message+`"`)) || strings.ContainsRune(e.Message, '\uFFFD') {
		t.Errorf("message cut inside a rune: %q", e.Message)
	}
}

func TestOverflowRing(t *testing.T) {
	r := New(Config{MaxRunnables: 2})
	l := newLogger(r)
	for i := range 4 {
		l.Named(fmt.Sprint("n", i)).Info("x")
	}
	got := map[string]int{}
	r.mu.Lock()
	for name, rg := range r.rings {
		got[name] = len(rg.lines)
	}
	r.mu.Unlock()
	if len(got) != 3 || got[OverflowRing] != 2 {
		t.Errorf("rings = %v, want two own rings and two lines in %s", got, OverflowRing)
	}
	// Lines in the overflow ring still carry their own name and filter by it.
	if got := messages(r.Backlog(Filter{Runnable: "n3"})); len(got) != 1 || got[0] != "n3: x" {
		t.Errorf("Backlog(n3) = %q", got)
	}
}

func TestFollowHasNoGapNoDuplicate(t *testing.T) {
	r := New(Config{})
	l := newLogger(r).Named("root")
	l.Info("before")
	backlog, sub := r.Follow(Filter{Runnable: "root"})
	defer sub.Close()
	l.Info("after")
	l.Named("x").Debug("debug is filtered")
	newLogger(r).Named("other").Info("other is filtered")
	l.Warn("last")
	if got := messages(backlog); len(got) != 1 || got[0] != "root: before" {
		t.Fatalf("backlog = %q", got)
	}
	for _, want := range []string{"root: after", "root: last"} {
		select {
		case e := <-sub.C():
			if got := e.Logger + ": " + e.Message; got != want {
				t.Fatalf("followed %q, want %q", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no line %q", want)
		}
	}
	select {
	case e := <-sub.C():
		t.Fatalf("unexpected line %+v", e)
	default:
	}
}

func TestSlowSubscriberDropsAndCounts(t *testing.T) {
	r := New(Config{SubscriberBuffer: 4})
	l := newLogger(r)
	_, slow := r.Follow(Filter{})
	defer slow.Close()
	// Never read: the logger must not block on it.
	for i := range 10 {
		l.Info(fmt.Sprint(i))
	}
	if got := slow.Dropped(); got != 6 {
		t.Errorf("Dropped = %d, want 6", got)
	}
	var seqs []uint64
	for range 4 {
		seqs = append(seqs, (<-slow.C()).Seq)
	}
	if fmt.Sprint(seqs) != "[1 2 3 4]" {
		t.Errorf("delivered %v, want the first four", seqs)
	}
	slow.Close()
	slow.Close() // twice is fine
	if n := r.Subscribers(); n != 0 {
		t.Errorf("%d subscribers after Close", n)
	}
}
