package nodeservice

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/kube/process"
	"github.com/polis-os/polis/supervisor/supervisortest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const waitTimeout = time.Minute

func waitStatus(t *testing.T, r *Runner, what string, pred func(*Status) bool) *Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	st, err := event.Get(ctx, r.Status(), event.Filter(pred))
	if err != nil {
		last, _ := event.Get(context.Background(), r.Status())
		t.Fatalf("waiting for %s: %v; last status %+v", what, err, last)
	}
	return st
}

// The runner writes the files (secrets 0600) before the process starts,
// Renew rewrites them and restarts the process, and a stop leaves no
// process behind.
func TestRunner(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "service")
	// The service notes the secret it was started with.
	if err := os.WriteFile(script, []byte("#!/bin/sh\ncat "+dir+"/conf/key >>"+dir+"/seen\necho >>"+dir+"/seen\nexec sleep 600\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	files := func(key string) []File {
		return []File{{Path: filepath.Join(dir, "conf", "config"), Data: []byte("config")}, {Path: filepath.Join(dir, "conf", "key"), Data: []byte(key), Secret: true}}
	}
	r, err := New(Spec{Name: "test", Files: files("one"), Command: process.Command{Path: script, Env: []string{"PATH=/usr/bin:/bin"}}, StopGrace: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if st := waitStatus(t, r, "not started", func(s *Status) bool { return s != nil }); st.Running || st.Note != "not started" {
		t.Errorf("before Run: %+v", st)
	}
	cancel := supervisortest.Harness(t, r.Run)
	first := waitStatus(t, r, "running", func(s *Status) bool { return s.Running })
	for name, perm := range map[string]os.FileMode{"config": 0o644, "key": 0o600} {
		if st, err := os.Stat(filepath.Join(dir, "conf", name)); err != nil || st.Mode().Perm() != perm {
			t.Errorf("%s: %v, want mode %v", name, err, perm)
		}
	}
	// Running says the process was started, not that it has read its
	// files yet: wait until it has, or Renew may stop it before.
	waitSeen(t, dir, "one")
	if err := r.Renew(files("two")); err != nil {
		t.Fatal(err)
	}
	second := waitStatus(t, r, "restarted", func(s *Status) bool { return s.Running && s.Starts >= 2 })
	if second.PID == first.PID {
		t.Errorf("Renew did not restart the process (pid %d)", first.PID)
	}
	if seen := waitSeen(t, dir, "two"); !strings.HasPrefix(seen, "one") {
		t.Errorf("the process saw %q, want one, then two", seen)
	}
	cancel()
	st := waitStatus(t, r, "stopped", func(s *Status) bool { return !s.Running })
	if st.PID != 0 || st.Note == "" {
		t.Errorf("stopped: %+v", st)
	}
	if err := syscall.Kill(second.PID, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("pid %d is still there after the stop: %v", second.PID, err)
	}
}

func TestNewRefusesBadSpecs(t *testing.T) {
	for name, tc := range map[string]struct {
		spec Spec
		says string
	}{
		"no name":         {Spec{Command: process.Command{Path: "/bin/true"}}, "no name"},
		"relative path":   {Spec{Name: "x", Command: process.Command{Path: "true"}}, `command "true" is not an absolute path`},
		"relative file":   {Spec{Name: "x", Command: process.Command{Path: "/bin/true"}, Files: []File{{Path: "conf"}}}, `file "conf" is not an absolute path`},
		"relative cgroup": {Spec{Name: "x", Command: process.Command{Path: "/bin/true"}, Cgroup: "kube-services/x"}, `cgroup "kube-services/x" is not a clean absolute path with a parent`},
		"unclean cgroup":  {Spec{Name: "x", Command: process.Command{Path: "/bin/true"}, Cgroup: "/sys/fs/cgroup/../x"}, `cgroup "/sys/fs/cgroup/../x"`},
		"cgroup at /":     {Spec{Name: "x", Command: process.Command{Path: "/bin/true"}, Cgroup: "/x"}, `cgroup "/x"`},
	} {
		if _, err := New(tc.spec); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want it to say %q", name, err, tc.says)
		}
	}
}

// waitSeen waits until the stand-in process in dir has noted reading a
// file that holds content, and returns all it noted.
func waitSeen(t *testing.T, dir, content string) string {
	t.Helper()
	var seen []byte
	testutil.Eventually(t, waitTimeout, "the process reading the file holding "+content, func() error {
		seen, _ = os.ReadFile(filepath.Join(dir, "seen"))
		if !strings.Contains(string(seen), content) {
			return fmt.Errorf("it noted %q", seen)
		}
		return nil
	})
	return string(seen)
}

// A Renew while a Run writes the files (the process not started yet, so
// nothing to restart) is not undone by the Run: the files end up holding
// what Renew gave, which the process then starts on.
func TestRenewDuringRunWins(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "key")
	files := func(k string) []File { return []File{{Path: key, Data: []byte(k), Secret: true}} }
	synctest.Test(t, func(t *testing.T) {
		r, err := New(Spec{Name: "test", Files: files("one"), Command: process.Command{Path: "/bin/true"}})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		r.chosen = func() {
			go func() { done <- r.Renew(files("two")) }()
			// The Renew has returned, or waits for the Run's write to end.
			synctest.Wait()
		}
		if err := r.writeFiles(); err != nil {
			t.Fatalf("writing the files: %v", err)
		}
		if err := <-done; err != nil {
			t.Fatalf("Renew: %v", err)
		}
	})
	if data, err := os.ReadFile(key); err != nil || string(data) != "two" {
		t.Errorf("the file holds %q (err %v), want the renewed two", data, err)
	}
}
