package roleserve

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/kube/kubelet"
	"github.com/polis-os/polis/supervisor/supervisortest"
)

// stepLog records the leftover steps a worker runs, in order.
type stepLog struct {
	mu    sync.Mutex
	calls []string
}

func (l *stepLog) step(name string, gate bool, fail func() error) cleanupStep {
	return cleanupStep{name: name, gate: gate, run: func(context.Context) error {
		l.mu.Lock()
		l.calls = append(l.calls, name)
		l.mu.Unlock()
		if fail != nil {
			return fail()
		}
		return nil
	}}
}

func (l *stepLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

// failUntil fails with "injected" until fixed is set.
func failUntil(fixed *atomic.Bool) func() error {
	return func() error {
		if !fixed.Load() {
			return errors.New("injected")
		}
		return nil
	}
}

// A worker that starts with the role not held removes what an earlier
// run may have left, in order; a step that fails is in the status and is
// tried again, alone, until it succeeds, after which the status is clean
// and nothing runs again.
func TestKubernetesWorkerRemovesLeftoversWithoutRole(t *testing.T) {
	w, v := leftoversWorker(t, "")
	var log stepLog
	var fixed atomic.Bool
	w.leftovers = []cleanupStep{log.step("stopped", true, nil), log.step("pod network", false, failUntil(&fixed)), log.step("tables", false, nil), log.step("bridge", false, nil)}
	supervisortest.Harness(t, w.run)
	v.Membership.Set(nil)
	v.LocalLabels.Set(nil)
	v.LocalPodRange.Set(netip.Prefix{})
	v.LocalRoles.Set(noRoles)

	st := waitFor(t, &v.KubernetesWorker, "the failed step in the status", func(s *KubernetesWorkerStatus) bool { return s != nil && s.Note != "" })
	if st.Held || !strings.Contains(st.Note, "pod network: injected") || !strings.Contains(st.Note, "trying again") {
		t.Errorf("status %+v, want the role not held and the failed step named", st)
	}
	if s := st.String(); !strings.Contains(s, "pod network: injected") {
		t.Errorf("String() %q does not say what failed", s)
	}
	testutil.Eventually(t, time.Minute, "the failed step tried again", func() error {
		if n := strings.Count(strings.Join(log.get(), ","), "pod network"); n < 3 {
			return fmt.Errorf("tried %d times", n)
		}
		return nil
	})
	fixed.Store(true)
	waitFor(t, &v.KubernetesWorker, "a clean status", func(s *KubernetesWorkerStatus) bool { return s != nil && !s.Held && s.Note == "" })
	calls := log.get()
	if want := []string{"stopped", "pod network", "tables", "bridge"}; !slices.Equal(calls[:4], want) {
		t.Errorf("first try ran %v, want %v", calls[:4], want)
	}
	for _, c := range calls[4:] {
		if c != "pod network" {
			t.Errorf("the retries ran %v, want the failed step alone", calls[4:])
			break
		}
	}
	// Other inputs wake the worker: nothing is removed again.
	n := len(calls)
	v.LocalLabels.Set(map[string]string{"zone": "a"})
	waitFor(t, &v.KubernetesWorker, "the status after a wake", func(s *KubernetesWorkerStatus) bool { return s != nil && !s.Held && s.Note == "" })
	if got := log.get(); len(got) != n {
		t.Errorf("steps ran again with nothing left: %v", got[n:])
	}
}

// A failed gate (the node's processes not all gone) holds back every step
// after it, which then all run once it succeeds.
func TestKubernetesWorkerLeftoversGate(t *testing.T) {
	w, v := leftoversWorker(t, "")
	var log stepLog
	var fixed atomic.Bool
	w.leftovers = []cleanupStep{log.step("stopped", true, failUntil(&fixed)), log.step("pod network", false, nil)}
	supervisortest.Harness(t, w.run)
	v.Membership.Set(nil)
	v.LocalLabels.Set(nil)
	v.LocalPodRange.Set(netip.Prefix{})
	v.LocalRoles.Set(noRoles)
	st := waitFor(t, &v.KubernetesWorker, "the failed gate in the status", func(s *KubernetesWorkerStatus) bool { return s != nil && s.Note != "" })
	if !strings.Contains(st.Note, "stopped: injected") {
		t.Errorf("note %q does not name the failed gate", st.Note)
	}
	testutil.Eventually(t, time.Minute, "the gate tried again", func() error {
		if n := len(log.get()); n < 2 {
			return fmt.Errorf("%d tries", n)
		}
		return nil
	})
	if calls := log.get(); slices.Contains(calls, "pod network") {
		t.Errorf("a step ran behind a failed gate: %v", calls)
	}
	fixed.Store(true)
	waitFor(t, &v.KubernetesWorker, "a clean status", func(s *KubernetesWorkerStatus) bool { return s != nil && !s.Held && s.Note == "" })
	if calls := log.get(); calls[len(calls)-1] != "pod network" || strings.Count(strings.Join(calls, ","), "pod network") != 1 {
		t.Errorf("steps ran %v, want the pod network's once, after the gate", calls)
	}
}

// What the role leaves is removed in this order, the node's processes
// first (the gate); a node without a runtime has nothing to remove (its
// machine's network is not its own). nodeStopped takes the kernel's word.
func TestLeftoverSteps(t *testing.T) {
	if steps := leftoverSteps(nil); len(steps) != 0 {
		t.Errorf("without a runtime: %d steps", len(steps))
	}
	var names []string
	steps := leftoverSteps(&KubernetesRuntime{BinDir: "/b"})
	for _, s := range steps {
		names = append(names, s.name)
	}
	want := []string{"the Kubernetes node's processes", "the pod network's WireGuard device and routes", "the nftables tables of kube-proxy and host ports", "the Pods' bridge " + kubelet.Bridge, "the Pods' CNI state"}
	if !slices.Equal(names, want) || !steps[0].gate || slices.ContainsFunc(steps[1:], func(s cleanupStep) bool { return s.gate }) {
		t.Errorf("steps %v (gate first: %v), want %v with the first alone a gate", names, steps[0].gate, want)
	}

	cgroup := t.TempDir()
	for populated, wantErr := range map[string]bool{"0": false, "1": true} {
		if err := os.WriteFile(filepath.Join(cgroup, "cgroup.events"), []byte("populated "+populated+"\nfrozen 0\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := nodeStopped(cgroup); (err != nil) != wantErr || (wantErr && !strings.Contains(err.Error(), cgroup)) {
			t.Errorf("populated %s: %v", populated, err)
		}
	}
	if err := nodeStopped(filepath.Join(cgroup, "gone")); err != nil {
		t.Errorf("a cgroup that is not there: %v", err)
	}
}

// leftoversWorker is a worker for the tests of what it removes and how it
// routes for a controller: a runtime whose paths it never touches, the
// cluster's pod range known, quick retries, a 1500-byte cluster link, and
// its WireGuard key in keyFile (a new file if "").
func leftoversWorker(t *testing.T, keyFile string) (*workerKubernetesWorker, *Values) {
	t.Helper()
	rt := &KubernetesRuntime{BinDir: "/b", CNIBinDir: "/c", PauseImage: "/p.tar", StateDir: "/s", RunDir: "/r"}
	v := NewValues()
	v.ClusterPodRange.Set(testClusterPodRange)
	if keyFile == "" {
		keyFile = filepath.Join(t.TempDir(), "wireguard.key")
	}
	w := newWorkerKubernetesWorker(&Graph{}, v, KubernetesConfig{Bundle: "/k", Runtime: rt}, kubeAddr, keyFile)
	w.leftoversRetry = 10 * time.Millisecond
	w.linkMTU = func(netip.Addr) (int, error) { return 1500, nil }
	return w, v
}
