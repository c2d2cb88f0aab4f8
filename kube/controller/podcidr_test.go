package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/kube/kubetest"
)

// The podcidr worker's logic, against a real etcd for the ranges and a
// stand-in for the apiserver's Node API (fakeAPIServer): a real apiserver
// needs the Kubernetes bundle, a long build, and the worker speaks only
// four calls of it.

// subnets gives each test its own 127.84.N.0/24 for etcd's peer listener.
var subnets = testutil.Subnets{Octet: 84}

// waitTimeout bounds each wait of a test; generous for a loaded machine.
const waitTimeout = time.Minute

// rangePrefix is where the tests keep the ranges, as the curator does
// under its own prefix: one key per range, the node ID its value.
const rangePrefix = "podranges/"

// recordPrefix is where the tests keep the node records, as the curator
// does: one key per node, the node ID after it.
const recordPrefix = "nodes/"

var testSource = PodRangeSource{
	Prefix: rangePrefix,
	Range: func(key []byte) (netip.Prefix, bool) {
		s, ok := strings.CutPrefix(string(key), rangePrefix)
		if !ok {
			return netip.Prefix{}, false
		}
		r, err := netip.ParsePrefix(s)
		return r, err == nil
	},
}

// fakeAPIServer serves what podCIDRs uses of the Node API: list, watch
// from a resource version, merge-patch of spec.podCIDR(s), delete (with a
// UID precondition or none). Like Kubernetes it answers 404 for a Node
// that does not exist, refuses to change a podCIDR that is set, and
// answers 409 to a delete whose UID is not the Node's.
type fakeAPIServer struct {
	mu    sync.Mutex
	rv    int
	nodes map[string]fakeNode
	// history is every change, for watches to replay from their version.
	history []fakeEvent
	// changed is closed, and replaced, at every change: what watches and
	// tests wait on.
	changed chan struct{}
	// patches and deletes name the Nodes of every PATCH and DELETE asked
	// for, answered 404 or not.
	patches, deletes []string
	// deleteUIDs are the UID preconditions of those DELETEs ("" none).
	deleteUIDs []string
	// uids counts the Nodes created, for their UIDs.
	uids int
	// beforeList, if set, runs (once) before a list is answered.
	beforeList func()
	// beforeDelete, if set, runs (once) before a delete is answered.
	beforeDelete func()
	// quit ends the watches when the test ends.
	quit chan struct{}
}

type fakeNode struct {
	uid         string
	labels      map[string]string
	annotations map[string]string
	podCIDR     string
	podCIDRs    []string
}

type fakeEvent struct {
	rv   int
	typ  string
	name string
	node fakeNode
}

func newFakeAPIServer(t *testing.T) (*fakeAPIServer, *httptest.Server) {
	f := &fakeAPIServer{nodes: map[string]fakeNode{}, changed: make(chan struct{}), quit: make(chan struct{})}
	srv := httptest.NewServer(f)
	// Cleanups run last first: the watches end before Close waits for
	// them.
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(f.quit) })
	return f, srv
}

// changeLocked records a change; f.mu is held.
func (f *fakeAPIServer) changeLocked(typ, name string, n fakeNode) {
	f.rv++
	f.history = append(f.history, fakeEvent{rv: f.rv, typ: typ, name: name, node: n})
	close(f.changed)
	f.changed = make(chan struct{})
}

// create adds Node name with podCIDR (a kubelet registering, or a Node
// that was there before).
func (f *fakeAPIServer) create(name, podCIDR string) {
	f.createMarked(name, podCIDR, nil, nil)
}

// createMarked adds Node name with podCIDR, labels and annotations, and
// returns its UID, new for every Node created.
func (f *fakeAPIServer) createMarked(name, podCIDR string, labels, annotations map[string]string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.uids++
	n := fakeNode{uid: fmt.Sprintf("uid-%d", f.uids), labels: labels, annotations: annotations, podCIDR: podCIDR}
	if podCIDR != "" {
		n.podCIDRs = []string{podCIDR}
	}
	f.nodes[name] = n
	f.changeLocked("ADDED", name, n)
	return n.uid
}

// remove deletes Node name as someone else would; with quietly, no watch
// hears of it, as if its DELETED event were still on its way.
func (f *fakeAPIServer) remove(name string, quietly bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.nodes[name]
	delete(f.nodes, name)
	if quietly {
		f.rv++
		close(f.changed)
		f.changed = make(chan struct{})
		return
	}
	f.changeLocked("DELETED", name, n)
}

// node returns Node name, if it exists.
func (f *fakeAPIServer) node(name string) (fakeNode, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.nodes[name]
	return n, ok
}

// asked returns the Nodes patched and deleted so far, 404 or not.
func (f *fakeAPIServer) asked() (patches, deletes []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.patches), slices.Clone(f.deletes)
}

// deleteUID returns the UID precondition of the deletes asked of Node
// name so far, in order.
func (f *fakeAPIServer) deleteUID(name string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for i, d := range f.deletes {
		if d == name {
			out = append(out, f.deleteUIDs[i])
		}
	}
	return out
}

func (f *fakeAPIServer) nodeJSON(name string, n fakeNode, rv int) map[string]any {
	return map[string]any{
		"metadata": map[string]any{"name": name, "uid": n.uid, "resourceVersion": strconv.Itoa(rv), "labels": n.labels, "annotations": n.annotations},
		"spec":     map[string]any{"podCIDR": n.podCIDR, "podCIDRs": n.podCIDRs},
	}
}

func (f *fakeAPIServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name, one := strings.CutPrefix(r.URL.Path, "/api/v1/nodes/")
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/api/v1/nodes" && r.URL.Query().Get("watch") == "1":
		f.watch(w, r)
	case r.Method == http.MethodGet && r.URL.Path == "/api/v1/nodes":
		f.list(w)
	case r.Method == http.MethodPatch && one:
		f.patch(w, r, name)
	case r.Method == http.MethodDelete && one:
		f.delete(w, r, name)
	default:
		http.Error(w, "the fake apiserver does not serve "+r.Method+" "+r.URL.String(), http.StatusNotImplemented)
	}
}

func (f *fakeAPIServer) list(w http.ResponseWriter) {
	f.mu.Lock()
	hook := f.beforeList
	f.beforeList = nil
	f.mu.Unlock()
	if hook != nil {
		hook()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	items := []any{}
	for name, n := range f.nodes {
		items = append(items, f.nodeJSON(name, n, f.rv))
	}
	writeJSON(w, http.StatusOK, map[string]any{"metadata": map[string]any{"resourceVersion": strconv.Itoa(f.rv)}, "items": items})
}

func (f *fakeAPIServer) watch(w http.ResponseWriter, r *http.Request) {
	from, err := strconv.Atoi(r.URL.Query().Get("resourceVersion"))
	if err != nil {
		http.Error(w, "bad resourceVersion", http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	for {
		f.mu.Lock()
		var evs []fakeEvent
		for _, ev := range f.history {
			if ev.rv > from {
				evs = append(evs, ev)
			}
		}
		changed := f.changed
		f.mu.Unlock()
		for _, ev := range evs {
			if err := enc.Encode(map[string]any{"type": ev.typ, "object": f.nodeJSON(ev.name, ev.node, ev.rv)}); err != nil {
				return
			}
			from = ev.rv
		}
		w.(http.Flusher).Flush()
		select {
		case <-changed:
		case <-r.Context().Done():
			return
		case <-f.quit:
			return
		}
	}
}

func (f *fakeAPIServer) patch(w http.ResponseWriter, r *http.Request, name string) {
	var body struct {
		Spec struct {
			PodCIDR  string   `json:"podCIDR"`
			PodCIDRs []string `json:"podCIDRs"`
		} `json:"spec"`
	}
	if r.Header.Get("Content-Type") != "application/merge-patch+json" {
		http.Error(w, "not a merge patch", http.StatusUnsupportedMediaType)
		return
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.patches = append(f.patches, name)
	n, ok := f.nodes[name]
	switch {
	case !ok:
		notFound(w, name)
		return
	case n.podCIDR != "" && n.podCIDR != body.Spec.PodCIDR:
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"kind": "Status", "reason": "Invalid", "message": "spec.podCIDR: Forbidden: node updates may not change podCIDR except from \"\" to valid"})
		return
	}
	n.podCIDR, n.podCIDRs = body.Spec.PodCIDR, body.Spec.PodCIDRs
	f.nodes[name] = n
	f.changeLocked("MODIFIED", name, n)
	writeJSON(w, http.StatusOK, f.nodeJSON(name, n, f.rv))
}

func (f *fakeAPIServer) delete(w http.ResponseWriter, r *http.Request, name string) {
	var opts struct {
		Kind          string `json:"kind"`
		Preconditions struct {
			UID string `json:"uid"`
		} `json:"preconditions"`
	}
	if r.ContentLength != 0 {
		if r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "delete options not in JSON", http.StatusUnsupportedMediaType)
			return
		}
		if err := json.NewDecoder(r.Body).Decode(&opts); err != nil || opts.Kind != "DeleteOptions" {
			http.Error(w, fmt.Sprintf("bad delete options (%v)", err), http.StatusBadRequest)
			return
		}
	}
	f.mu.Lock()
	hook := f.beforeDelete
	f.beforeDelete = nil
	f.mu.Unlock()
	if hook != nil {
		hook()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deletes = append(f.deletes, name)
	f.deleteUIDs = append(f.deleteUIDs, opts.Preconditions.UID)
	n, ok := f.nodes[name]
	if !ok {
		notFound(w, name)
		return
	}
	if uid := opts.Preconditions.UID; uid != "" && uid != n.uid {
		writeJSON(w, http.StatusConflict, map[string]any{"kind": "Status", "reason": "Conflict", "message": fmt.Sprintf("Precondition failed: UID in precondition: %s, UID in object meta: %s", uid, n.uid)})
		return
	}
	delete(f.nodes, name)
	f.changeLocked("DELETED", name, n)
	writeJSON(w, http.StatusOK, map[string]any{"kind": "Status", "status": "Success"})
}

func notFound(w http.ResponseWriter, name string) {
	writeJSON(w, http.StatusNotFound, map[string]any{"kind": "Status", "reason": "NotFound", "message": fmt.Sprintf("nodes %q not found", name)})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// podCIDRTest is one test's etcd, apiserver stand-in and worker.
type podCIDRTest struct {
	t    *testing.T
	cli  *clientv3.Client
	api  *fakeAPIServer
	p    *podCIDRs
	logs *observer.ObservedLogs
	log  *zap.Logger
	// stop ends the running follow, if any, and fails the test if it
	// ended otherwise than by being stopped.
	stop func()
	// ended is closed when the running follow returns on its own.
	ended chan struct{}
	err   error
	// syncs counts the Nodes sync made.
	syncs int
}

func newPodCIDRTest(t *testing.T) *podCIDRTest {
	cli := kubetest.StartEtcd(t, testutil.FreePort(t, subnets.Addrs(1)[0]))
	api, srv := newFakeAPIServer(t)
	core, logs := observer.New(zapcore.InfoLevel)
	return &podCIDRTest{
		t:    t,
		cli:  cli,
		api:  api,
		p:    &podCIDRs{hc: srv.Client(), server: srv.URL, cli: cli, source: testSource},
		logs: logs,
		log:  zap.New(zapcore.NewTee(core, zaptest.NewLogger(t).Core())),
	}
}

// follow runs p.follow until the test ends or stop is called.
func (c *podCIDRTest) follow() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	ended := make(chan struct{})
	c.ended = ended
	go func() {
		defer close(done)
		c.err = c.p.follow(ctx, c.log)
		if ctx.Err() == nil {
			close(ended)
		}
	}()
	stopped := false
	c.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		<-done
		if !errors.Is(c.err, context.Canceled) {
			c.t.Errorf("follow ended on its own: %v", c.err)
		}
	}
	c.t.Cleanup(c.stop)
}

func (c *podCIDRTest) putRange(r, id string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if _, err := c.cli.Put(ctx, rangePrefix+r, id); err != nil {
		c.t.Fatalf("giving %s to %s: %v", r, id, err)
	}
}

// withRecords gives the worker the node records, as the role server
// does: recordPrefix, where putRecord writes.
func (c *podCIDRTest) withRecords() {
	c.p.nodes = NodeRecordSource{Prefix: recordPrefix}
}

// putRecord writes the record of Polis node id, as the curator does when
// the node registers.
func (c *podCIDRTest) putRecord(id string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if _, err := c.cli.Put(ctx, recordPrefix+id, "record"); err != nil {
		c.t.Fatalf("writing the record of %s: %v", id, err)
	}
}

func (c *podCIDRTest) deleteRange(r string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if _, err := c.cli.Delete(ctx, rangePrefix+r); err != nil {
		c.t.Fatalf("deleting range %s: %v", r, err)
	}
}

// waitFor waits until cond holds of the apiserver stand-in, failing the
// test if the follow ends first or waitTimeout passes.
func (c *podCIDRTest) waitFor(what string, cond func() bool) {
	c.t.Helper()
	deadline := time.After(waitTimeout)
	for {
		c.api.mu.Lock()
		changed := c.api.changed
		c.api.mu.Unlock()
		if cond() {
			return
		}
		select {
		case <-changed:
		case <-c.ended:
			c.t.Fatalf("waiting for %s: follow ended: %v", what, c.err)
		case <-deadline:
			c.t.Fatalf("%s: not after %v", what, waitTimeout)
		}
	}
}

// waitPodCIDR waits until Node name says podCIDR r (in both fields).
func (c *podCIDRTest) waitPodCIDR(name, r string) {
	c.t.Helper()
	c.waitFor(fmt.Sprintf("Node %s's podCIDR %s", name, r), func() bool {
		n, ok := c.api.node(name)
		return ok && n.podCIDR == r && slices.Equal(n.podCIDRs, []string{r})
	})
}

// waitGone waits until Node name is deleted.
func (c *podCIDRTest) waitGone(name string) {
	c.t.Helper()
	c.waitFor("Node "+name+" deleted", func() bool {
		_, ok := c.api.node(name)
		return !ok
	})
}

// sync makes sure that the follow has done all it would do for the
// changes of the Nodes and ranges made so far: a fresh Node and then its
// range, both in their streams after those changes, which it takes in
// order; when the Node gets its podCIDR, the follow has taken in both,
// and so everything before. The patches of that pass may still be under
// way: a second Node, which only a later pass can patch, waits for them.
func (c *podCIDRTest) sync() {
	c.t.Helper()
	for range 2 {
		c.syncs++
		name, r := fmt.Sprintf("sync-%d", c.syncs), fmt.Sprintf("10.250.%d.0/24", c.syncs)
		c.api.create(name, "")
		if c.p.nodes.Prefix != "" {
			c.putRecord(name) // a node with a range has a record
		}
		c.putRange(r, name)
		c.waitPodCIDR(name, r)
	}
}

// waitLogged waits until message msg is logged, failing the test if the
// follow ends first or waitTimeout passes.
func (c *podCIDRTest) waitLogged(msg string) {
	c.t.Helper()
	deadline := time.After(waitTimeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for c.logs.FilterMessage(msg).Len() == 0 {
		select {
		case <-tick.C:
		case <-c.ended:
			c.t.Fatalf("waiting for the log %q: follow ended: %v", msg, c.err)
		case <-deadline:
			c.t.Fatalf("%q not logged after %v", msg, waitTimeout)
		}
	}
}

// logged returns the entries with message msg about Node name.
func (c *podCIDRTest) logged(msg, name string) []observer.LoggedEntry {
	return c.logs.FilterMessage(msg).FilterField(zap.String("node", name)).All()
}

// A Node waiting for its range gets it as soon as both exist: a range and
// a Node there from the start, a range given later, a Node registered
// later.
func TestPodCIDRSetWhenRangeAppears(t *testing.T) {
	c := newPodCIDRTest(t)
	c.putRange("10.244.1.0/24", "early")
	c.api.create("early", "")
	c.api.create("late-range", "")
	c.putRange("10.244.3.0/24", "late-node")
	c.follow()
	c.waitPodCIDR("early", "10.244.1.0/24")

	c.putRange("10.244.2.0/24", "late-range")
	c.waitPodCIDR("late-range", "10.244.2.0/24")

	c.api.create("late-node", "")
	c.waitPodCIDR("late-node", "10.244.3.0/24")
	c.sync() // its log written

	if _, deletes := c.api.asked(); len(deletes) != 0 {
		t.Errorf("Nodes deleted: %v, want none", deletes)
	}
	if got := c.logged("set the Node's podCIDR", "late-range"); len(got) != 1 {
		t.Errorf("logged the podCIDR of late-range set %d times, want once", len(got))
	}
}

// A Node whose podCIDR is set, but is not its node's range, is reported
// (Kubernetes would refuse to change it), listed or reported by the watch,
// and is left alone: neither patched nor deleted.
func TestPodCIDRMismatchReported(t *testing.T) {
	c := newPodCIDRTest(t)
	c.putRange("10.244.1.0/24", "listed")
	c.api.create("listed", "10.244.9.0/24")
	c.putRange("10.244.2.0/24", "watched")
	c.follow()
	c.sync()
	c.api.create("watched", "10.244.8.0/24")
	c.sync()

	for name, want := range map[string][2]string{"listed": {"10.244.9.0/24", "10.244.1.0/24"}, "watched": {"10.244.8.0/24", "10.244.2.0/24"}} {
		got := c.logged("a Node's podCIDR is not its pod range, and Kubernetes does not change one that is set", name)
		if len(got) == 0 {
			t.Errorf("Node %s's podCIDR %s, not its range %s: not reported", name, want[0], want[1])
			continue
		}
		fields := got[0].ContextMap()
		if fields["podCIDR"] != want[0] || fields["podRange"] != want[1] {
			t.Errorf("Node %s reported with %v, want podCIDR %s and podRange %s", name, fields, want[0], want[1])
		}
		if got[0].Level != zapcore.WarnLevel {
			t.Errorf("Node %s reported at level %v, want a warning", name, got[0].Level)
		}
		if n, ok := c.api.node(name); !ok || n.podCIDR != want[0] {
			t.Errorf("Node %s: %+v (there: %v), want it left with podCIDR %s", name, n, ok, want[0])
		}
	}
	patches, deletes := c.api.asked()
	if slices.Contains(patches, "listed") || slices.Contains(patches, "watched") || len(deletes) != 0 {
		t.Errorf("patched %v and deleted %v; want neither mismatched Node touched", patches, deletes)
	}
}

// A Node deleted while it waits for its range is dropped when its DELETED
// event comes: its range, given later, patches nothing, and the follow
// goes on.
func TestPodCIDRNodeDeletedWhileWaiting(t *testing.T) {
	c := newPodCIDRTest(t)
	c.api.create("doomed", "")
	c.follow()
	c.sync()

	c.api.remove("doomed", false)
	c.sync() // the DELETED event came before
	c.putRange("10.244.1.0/24", "doomed")
	c.sync() // the range came before

	if patches, _ := c.api.asked(); slices.Contains(patches, "doomed") {
		t.Errorf("patched %v: the deleted Node was patched", patches)
	}
}

// A Node deleted while it waits, whose DELETED event has not come when its
// range does, answers the patch 404: it is gone, not a failure, and the
// follow goes on.
func TestPodCIDRPatchOfGoneNode(t *testing.T) {
	c := newPodCIDRTest(t)
	c.api.create("doomed", "")
	c.follow()
	c.sync()

	c.api.remove("doomed", true)
	c.putRange("10.244.1.0/24", "doomed")
	c.sync()

	if patches, _ := c.api.asked(); !slices.Contains(patches, "doomed") {
		t.Fatalf("patched %v: the gone Node was not tried, so this test tested nothing", patches)
	}
	if got := c.logged("the Node was deleted before its podCIDR could be set", "doomed"); len(got) != 1 {
		t.Errorf("the gone Node logged %d times, want once", len(got))
	}
}

// When a node's range is deleted (the curator deletes it only with the
// node), the Node of that name is deleted, and the next worker given the
// range is the only Node that names it.
func TestPodCIDRRangeDeletedDeletesNode(t *testing.T) {
	c := newPodCIDRTest(t)
	c.putRange("10.244.1.0/24", "old")
	c.api.create("old", "")
	c.follow()
	c.waitPodCIDR("old", "10.244.1.0/24")
	c.sync() // its MODIFIED event taken in

	c.deleteRange("10.244.1.0/24")
	c.waitGone("old")
	c.sync() // its log written
	got := c.logged("deleted the Node of a deleted Polis node", "old")
	if len(got) != 1 || got[0].ContextMap()["podRange"] != "10.244.1.0/24" || got[0].ContextMap()["reason"] == "" {
		t.Errorf("the deletion logged as %+v, want once with its podRange and reason", got)
	}

	c.api.create("new", "")
	c.putRange("10.244.1.0/24", "new")
	c.waitPodCIDR("new", "10.244.1.0/24")

	// A node deleted before its kubelet registered has no Node: its
	// range's deletion is no failure.
	c.putRange("10.244.2.0/24", "never")
	c.deleteRange("10.244.2.0/24")
	c.sync()
	if _, deletes := c.api.asked(); !slices.Equal(deletes, []string{"old", "never"}) {
		t.Errorf("deleted %v, want old and never (404)", deletes)
	}
}

// Nodes of Polis nodes deleted while no follow watched are deleted when
// the follow starts: one whose podCIDR names a range another node holds
// now, one whose podCIDR names a range nobody holds; and one whose podCIDR
// was still empty, when the range went between two follows.
func TestPodCIDRStaleNodesDeleted(t *testing.T) {
	c := newPodCIDRTest(t)
	c.putRange("10.244.1.0/24", "successor")
	takenUID := c.api.createMarked("taken", "10.244.1.0/24", nil, nil)
	freedUID := c.api.createMarked("freed", "10.244.2.0/24", nil, nil)
	c.putRange("10.244.3.0/24", "between")
	c.follow()
	c.waitGone("taken")
	c.waitGone("freed")
	c.sync() // their logs written
	for name, holder := range map[string]any{"taken": "successor", "freed": nil} {
		got := c.logged("deleted the Node of a deleted Polis node", name)
		if len(got) != 1 || got[0].ContextMap()["podRangeHolder"] != holder {
			t.Errorf("the deletion of %s logged as %+v, want once, with the range's holder %v", name, got, holder)
		}
	}
	// Only the Nodes as listed: one registered anew since would be kept.
	for name, uid := range map[string]string{"taken": takenUID, "freed": freedUID} {
		if got := c.api.deleteUID(name); !slices.Equal(got, []string{uid}) {
			t.Errorf("Node %s deleted with UID preconditions %q, want once with its UID %s", name, got, uid)
		}
	}

	// "between" holds a range but has no Node yet; it registers and its
	// node is deleted while the follow is not running.
	c.stop()
	c.api.create("between", "")
	c.deleteRange("10.244.3.0/24")
	c.follow()
	c.waitGone("between")
	c.sync() // its log written
	if got := c.logged("deleted the Node of a deleted Polis node", "between"); len(got) != 1 || got[0].ContextMap()["podRange"] != "10.244.3.0/24" {
		t.Errorf("the deletion of between logged as %+v, want once, with the range it held", got)
	}
}

// A Node whose podCIDR is empty and whose node has no range is a live
// worker's, waiting: it is not deleted, whatever else happens; nor is a
// Node whose podCIDR another controller node set from a range given after
// this one read the ranges.
func TestPodCIDRWaitingNodeKept(t *testing.T) {
	c := newPodCIDRTest(t)
	c.api.create("waiting", "")
	c.putRange("10.244.1.0/24", "other")
	// Between this follow's read of the ranges and its list of the Nodes,
	// "fresh" gets a range and another controller node sets its podCIDR.
	c.api.beforeList = func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if _, err := c.cli.Put(ctx, rangePrefix+"10.244.4.0/24", "fresh"); err != nil {
			t.Errorf("giving fresh its range: %v", err)
		}
		c.api.create("fresh", "10.244.4.0/24")
	}
	c.follow()
	c.sync()

	c.deleteRange("10.244.1.0/24") // another node deleted
	c.api.remove("waiting", false) // the kubelet registers again
	c.api.create("waiting", "")
	c.sync()

	for _, name := range []string{"waiting", "fresh"} {
		if _, ok := c.api.node(name); !ok {
			t.Errorf("Node %s was deleted", name)
		}
	}
	if _, deletes := c.api.asked(); !slices.Equal(deletes, []string{"other"}) {
		t.Errorf("deleted %v, want only other (404: it had no Node)", deletes)
	}
}

// nodeID is the n-th node ID of a test, in the form of identity.NodeID.
func nodeID(n int) string { return fmt.Sprintf("node-%024x", n) }

// polisMark is what the kubelet runner sets on the Node of every Polis
// node: its list of the labels it set (empty for a node without labels).
var polisMark = map[string]string{"node.polis-os.io/labels": ""}

// sweptReason is the reason a Node of a Polis node without a record is
// logged deleted with.
const sweptReason = "its Polis node has no record: the node was deleted"

// checkSwept checks that Node name was deleted once, logged with
// sweptReason, with a UID precondition of uid.
func (c *podCIDRTest) checkSwept(name, uid string) {
	c.t.Helper()
	if _, ok := c.api.node(name); ok {
		c.t.Errorf("Node %s, whose Polis node has no record, is still there", name)
		return
	}
	if got := c.api.deleteUID(name); !slices.Equal(got, []string{uid}) {
		c.t.Errorf("Node %s deleted with UID preconditions %q, want once with %q", name, got, uid)
	}
	got := c.logged("deleted the Node of a deleted Polis node", name)
	if len(got) != 1 || got[0].ContextMap()["reason"] != sweptReason || got[0].ContextMap()["uid"] != uid {
		c.t.Errorf("the deletion of %s logged as %+v, want once with reason %q and uid %s", name, got, sweptReason, uid)
	}
}

// The Node of a Polis node deleted while no follow watched is deleted
// when a follow starts, each time one does, whatever its podCIDR: empty
// (deleted before it was set), or a range the pool gives the next worker.
// A Polis node's Node is told by either mark of the kubelet runner: its
// annotation, or a label under its prefix.
func TestPodCIDRGhostNodesDeleted(t *testing.T) {
	c := newPodCIDRTest(t)
	c.withRecords()
	live, empty, labelled, later := nodeID(1), nodeID(2), nodeID(3), nodeID(4)
	c.putRecord(live)
	c.putRange("10.244.1.0/24", live)
	c.api.createMarked(live, "", nil, polisMark)
	emptyUID := c.api.createMarked(empty, "", nil, polisMark)
	labelledUID := c.api.createMarked(labelled, "10.244.2.0/24", map[string]string{"node.polis-os.io/zone": "a"}, nil)
	c.follow()
	c.waitGone(empty)
	c.waitGone(labelled)
	c.waitPodCIDR(live, "10.244.1.0/24")
	c.sync() // the logs written
	c.checkSwept(empty, emptyUID)
	c.checkSwept(labelled, labelledUID)

	// A node deleted, its Node left, while the follow does not run: the
	// next one deletes it.
	c.stop()
	laterUID := c.api.createMarked(later, "", nil, polisMark)
	c.follow()
	c.waitGone(later)
	c.sync()
	c.checkSwept(later, laterUID)
	if _, ok := c.api.node(live); !ok {
		t.Errorf("Node %s, whose Polis node has its record, was deleted", live)
	}
}

// The Node of a Polis node that has its record is kept, whatever its
// podCIDR and range: with neither (a worker waiting for its range, or a
// node without the role), with both, and one whose node registered (its
// record, then its Node) just before the Nodes were listed; while a Node
// beside them whose node has no record is deleted.
func TestPodCIDRNodeWithRecordKept(t *testing.T) {
	c := newPodCIDRTest(t)
	c.withRecords()
	waiting, ranged, fresh, ghost := nodeID(1), nodeID(2), nodeID(3), nodeID(4)
	c.putRecord(waiting)
	c.putRecord(ranged)
	c.putRange("10.244.2.0/24", ranged)
	c.api.createMarked(waiting, "", nil, polisMark)
	c.api.createMarked(ranged, "10.244.2.0/24", map[string]string{"node.polis-os.io/zone": "a"}, polisMark)
	ghostUID := c.api.createMarked(ghost, "", nil, polisMark)
	// Only the records read after the list may say which listed Node's
	// node is gone.
	c.api.beforeList = func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if _, err := c.cli.Put(ctx, recordPrefix+fresh, "record"); err != nil {
			t.Errorf("writing the record of %s: %v", fresh, err)
		}
		c.api.createMarked(fresh, "", nil, polisMark)
	}
	c.follow()
	c.waitGone(ghost) // the sweep ran
	c.sync()
	c.checkSwept(ghost, ghostUID)

	for _, name := range []string{waiting, ranged, fresh} {
		if _, ok := c.api.node(name); !ok {
			t.Errorf("Node %s, whose Polis node has its record, was deleted", name)
		}
	}
	if _, deletes := c.api.asked(); !slices.Equal(deletes, []string{ghost}) {
		t.Errorf("deleted %v, want only %s", deletes, ghost)
	}
}

// A Node not known to be a Polis node's is left alone, though no Polis
// node of its name has a record: one named as a node ID without the
// kubelet runner's marks (a label of another prefix, say), and one with
// the marks but not named as a node ID; while a Polis node's Node beside
// them whose node has no record is deleted.
func TestPodCIDRForeignNodeKept(t *testing.T) {
	c := newPodCIDRTest(t)
	c.withRecords()
	c.putRecord(nodeID(9)) // this node
	unmarked, ghost := nodeID(1), nodeID(2)
	c.api.createMarked(unmarked, "", map[string]string{"example.com/polis-os.io": "x"}, map[string]string{"node.polis-os.io/other": ""})
	c.api.createMarked("worker-1", "", map[string]string{"node.polis-os.io/zone": "a"}, polisMark)
	ghostUID := c.api.createMarked(ghost, "", nil, polisMark)
	c.follow()
	c.waitGone(ghost) // the sweep ran
	c.sync()
	c.checkSwept(ghost, ghostUID)

	for _, name := range []string{unmarked, "worker-1"} {
		if _, ok := c.api.node(name); !ok {
			t.Errorf("Node %s, not known to be a Polis node's, was deleted", name)
		}
	}
	if _, deletes := c.api.asked(); !slices.Equal(deletes, []string{ghost}) {
		t.Errorf("deleted %v, want only %s", deletes, ghost)
	}
}

// A Node registered anew between the list and the delete is not the Node
// listed: the delete's UID precondition keeps it (here its node has a
// record again by then), and that is no failure.
func TestPodCIDRNodeRegisteredAnewKept(t *testing.T) {
	c := newPodCIDRTest(t)
	c.withRecords()
	c.putRecord(nodeID(9)) // this node
	id := nodeID(1)
	oldUID := c.api.createMarked(id, "", nil, polisMark)
	var newUID string
	c.api.beforeDelete = func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if _, err := c.cli.Put(ctx, recordPrefix+id, "record"); err != nil {
			t.Errorf("writing the record of %s: %v", id, err)
		}
		c.api.remove(id, false)
		newUID = c.api.createMarked(id, "", nil, polisMark)
	}
	c.follow()
	c.sync()

	if got := c.api.deleteUID(id); !slices.Equal(got, []string{oldUID}) {
		t.Fatalf("deletes of %s with UIDs %q, want one with the listed Node's %s: the sweep did not try, so this test tested nothing", id, got, oldUID)
	}
	if n, ok := c.api.node(id); !ok || n.uid != newUID {
		t.Errorf("Node %s: %+v (there: %v), want the one registered anew, %s, kept", id, n, ok, newUID)
	}
	if got := c.logged("kept a Node registered anew since it was read, though its Polis node was deleted", id); len(got) != 1 || got[0].ContextMap()["uid"] != oldUID {
		t.Errorf("the kept Node logged as %+v, want once with the listed UID %s", got, oldUID)
	}
	if got := c.logged("deleted the Node of a deleted Polis node", id); len(got) != 0 {
		t.Errorf("logged as deleted: %+v", got)
	}
}

// Records that do not look like the curator's (none at all; a node that
// holds a range without a record) mean they were looked for in the wrong
// place, not that every node was deleted: nothing is deleted, and that is
// said.
func TestPodCIDRSweepNeedsSoundRecords(t *testing.T) {
	for _, tc := range []struct {
		name    string
		prepare func(c *podCIDRTest)
		says    string
	}{
		{"no records", func(c *podCIDRTest) {}, "not deleting the Nodes of deleted Polis nodes: no node record found, not even this node's"},
		{"a range holder without one", func(c *podCIDRTest) {
			c.putRecord(nodeID(9))
			c.putRange("10.244.1.0/24", nodeID(8))
		}, "not deleting the Nodes of deleted Polis nodes: a node holds a pod range but has no record, so the records are not where they were looked for"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newPodCIDRTest(t)
			c.withRecords()
			tc.prepare(c)
			ghost := nodeID(1)
			c.api.createMarked(ghost, "", nil, polisMark)
			c.follow()
			// Before sync, whose nodes get records of their own.
			c.waitLogged(tc.says)
			c.sync()
			if _, ok := c.api.node(ghost); !ok {
				t.Errorf("Node %s deleted on records that do not look like the curator's", ghost)
			}
			got := c.logs.FilterMessage(tc.says).All()
			if len(got) != 1 || got[0].Level != zapcore.WarnLevel || got[0].ContextMap()["nodeRecordPrefix"] != recordPrefix {
				t.Errorf("logged %+v, want one warning %q naming the prefix", got, tc.says)
			}
		})
	}
}
