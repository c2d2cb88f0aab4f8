package kubelet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/polis-os/polis/kube/pki"
)

// scriptedAPI is an apiserver whose answers to the Node's list and watch a
// test gives one by one: each list answers the next of lists (403 once
// they are used up); each watch is announced on watches with its query
// and streams what the test sends on events ("" ends it cleanly).
type scriptedAPI struct {
	mu      sync.Mutex
	lists   []string
	watches chan url.Values
	events  chan string
	done    chan struct{}
}

func (a *scriptedAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if r.URL.Path != "/api/v1/nodes" || q.Get("fieldSelector") != "metadata.name=node-1" {
		http.Error(w, "not this", http.StatusForbidden)
		return
	}
	if q.Get("watch") != "1" {
		a.mu.Lock()
		defer a.mu.Unlock()
		if len(a.lists) == 0 {
			http.Error(w, `nodes is forbidden: User "system:node:node-1" cannot list`, http.StatusForbidden)
			return
		}
		_, _ = w.Write([]byte(a.lists[0]))
		a.lists = a.lists[1:]
		return
	}
	select {
	case a.watches <- q:
	case <-r.Context().Done():
		return
	case <-a.done:
		return
	}
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	for {
		select {
		case ev := <-a.events:
			if ev == "" {
				return
			}
			_, _ = w.Write([]byte(ev + "\n"))
			w.(http.Flusher).Flush()
		case <-r.Context().Done():
			return
		case <-a.done:
			return
		}
	}
}

func nodeJSON(rv int, ready string) string {
	return fmt.Sprintf(`{"metadata":{"name":"node-1","resourceVersion":"%d"},"status":{"conditions":[{"type":"MemoryPressure","status":"False"},{"type":"Ready","status":"%s","reason":"KubeletNotReady","message":"PLEG is not healthy"}]}}`, rv, ready)
}

// followNode reads the Node, then follows it by watches: what it sees at
// each change is told at once (no poll); a watch ended by the apiserver
// is resumed from the last resourceVersion (a bookmark's too) without a
// read, also when it saw nothing; an expired one (410) and a broken one are followed by a new read;
// a read that fails is told as the reason the Node is not Ready.
func TestFollowNode(t *testing.T) {
	c, err := pki.NewCluster("test", now)
	if err != nil {
		t.Fatal(err)
	}
	api := &scriptedAPI{
		lists: []string{
			`{"kind":"NodeList","metadata":{"resourceVersion":"5"},"items":[]}`,
			`{"kind":"NodeList","metadata":{"resourceVersion":"20"},"items":[` + nodeJSON(20, "True") + `]}`,
			`{"kind":"NodeList","metadata":{"resourceVersion":"30"},"items":[` + nodeJSON(30, "False") + `]}`,
		},
		watches: make(chan url.Values),
		events:  make(chan string),
		done:    make(chan struct{}),
	}
	addr := serveAPI(t, c, api)
	t.Cleanup(func() { close(api.done) })
	hc, err := httpClient(credentials(t, c, "node-1"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hc.CloseIdleConnections)

	seen := make(chan error, 100)
	failed := make(chan error, 100)
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan error, 1)
	go func() {
		ended <- followNode(ctx, func() (*http.Client, error) { return hc, nil }, "https://"+addr.String(), "node-1", time.Time{},
			func(err error) { seen <- err }, func(err error) { failed <- err })
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-ended; !errors.Is(err, context.Canceled) {
			t.Errorf("followNode ended with %v, want context.Canceled", err)
		}
	})
	next := func(ch chan error, what string) error {
		t.Helper()
		select {
		case err := <-ch:
			return err
		case <-time.After(waitTimeout):
			t.Fatalf("waiting for %s: nothing after %v", what, waitTimeout)
			return nil
		}
	}
	want := func(what, contains string) {
		t.Helper()
		err := next(seen, what)
		switch {
		case contains == "" && err != nil:
			t.Fatalf("%s: the Node is not Ready (%v), want Ready", what, err)
		case contains != "" && (err == nil || !strings.Contains(err.Error(), contains)):
			t.Fatalf("%s: told %v, want an error saying %q", what, err, contains)
		}
	}
	watch := func(what, rv string) {
		t.Helper()
		select {
		case q := <-api.watches:
			for k, v := range map[string]string{"watch": "1", "resourceVersion": rv, "allowWatchBookmarks": "true", "fieldSelector": "metadata.name=node-1"} {
				if q.Get(k) != v {
					t.Errorf("%s: %s=%q, want %q (query %v)", what, k, q.Get(k), v, q)
				}
			}
			if q.Get("timeoutSeconds") == "" {
				t.Errorf("%s: no timeoutSeconds: the watch would last as long as the apiserver's default", what)
			}
		case <-time.After(waitTimeout):
			t.Fatalf("waiting for %s", what)
		}
	}
	send := func(ev string) {
		t.Helper()
		select {
		case api.events <- ev:
		case <-time.After(waitTimeout):
			t.Fatalf("the watch does not take the event %s", ev)
		}
	}

	// Not registered yet: read as an empty list, watched from its version.
	want("the first read", "not registered yet")
	watch("the first watch", "5")
	send(`{"type":"ADDED","object":` + nodeJSON(6, "False") + `}`)
	want("registered", "not Ready: KubeletNotReady: PLEG is not healthy")
	send(`{"type":"MODIFIED","object":` + nodeJSON(7, "True") + `}`)
	want("Ready", "")
	send(`{"type":"BOOKMARK","object":{"kind":"Node","metadata":{"resourceVersion":"9"}}}`)
	send("") // the apiserver's timeout
	watch("the watch resumed after its clean end, from the bookmark", "9")
	send("") // ended with nothing seen
	watch("the watch resumed after an empty one, from the same version", "9")

	send(`{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"too old resource version: 9 (15)"}}`)
	if err := next(failed, "the expiry told"); !errors.Is(err, errWatchExpired) {
		t.Errorf("failed told %v, want errWatchExpired", err)
	}
	want("the second read, after the expiry", "")
	watch("the watch after the second read", "20")
	send(`{"type":"DELETED","object":` + nodeJSON(21, "True") + `}`)
	want("deleted", "the Node was deleted")

	// A broken stream: read again (after a backoff), watched anew.
	send(`{"type":"MODIFIED","object":`)
	send("")
	if err := next(failed, "the broken watch told"); err == nil || !strings.Contains(err.Error(), "watching the Node") {
		t.Errorf("failed told %v, want the watch's error", err)
	}
	want("the third read, after the broken watch", "not Ready")
	watch("the watch after the third read", "30")
	send(`{"type":"ERROR","object":{"kind":"Status","code":500,"reason":"InternalError","message":"etcd is gone"}}`)
	if err := next(failed, "the error event told"); err == nil || !strings.Contains(err.Error(), "etcd is gone") {
		t.Errorf("failed told %v, want the ERROR event's message", err)
	}
	// A read refused: the status says why.
	want("the fourth read, refused", "403 Forbidden")
}

// readiness: Ready only if the condition says True and was posted in
// this run (a reboot's Node keeps the last boot's Ready until the node
// controller marks it Unknown); otherwise it says why not.
func TestReadiness(t *testing.T) {
	since := time.Date(2026, 11, 28, 10, 0, 0, 600e6, time.UTC)
	nodeWith := func(ready, heartbeat string) *node {
		var n node
		js := `{"status":{"conditions":[{"type":"MemoryPressure","status":"False","lastHeartbeatTime":"2026-11-28T10:00:05Z"},{"type":"Ready","status":"` + ready + `","reason":"KubeletNotReady","message":"PLEG is not healthy","lastHeartbeatTime":"` + heartbeat + `"}]}}`
		if err := json.Unmarshal([]byte(js), &n); err != nil {
			t.Fatal(err)
		}
		return &n
	}
	for _, c := range []struct {
		name string
		n    *node
		want string // "" for Ready
	}{
		{"not registered", nil, "not registered"},
		{"no condition", &node{}, "no Ready condition"},
		{"Ready, posted in this run", nodeWith("True", "2026-11-28T10:00:07Z"), ""},
		// The API's times are whole seconds: a post in since's own
		// second counts as this run's.
		{"Ready, posted in the run's first second", nodeWith("True", "2026-11-28T10:00:00Z"), ""},
		{"Ready, posted before this run (the last boot's)", nodeWith("True", "2026-11-28T09:59:59Z"), "posted at 2026-11-28T09:59:59Z, before this kubelet's run began (2026-11-28T10:00:00Z)"},
		{"not Ready", nodeWith("False", "2026-11-28T10:00:07Z"), "not Ready: KubeletNotReady: PLEG is not healthy"},
		{"not Ready, before this run", nodeWith("Unknown", "2026-11-28T09:59:00Z"), "not Ready: KubeletNotReady"},
	} {
		err := readiness(c.n, since)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v, want Ready", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
}
