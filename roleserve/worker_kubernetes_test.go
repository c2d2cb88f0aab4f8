package roleserve

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/supervisor/supervisortest"
)

var kubeAddr = netip.MustParseAddr("192.0.2.1")

// The status shows the controller role and says why it is not run:
// without a bundle, with a bundle that is not there, and before the local consensus
// member runs. Running the control plane itself is tested with real
// processes in kube/roletest.
func TestKubernetesIsHonest(t *testing.T) {
	both := &cpb.Roles{ConsensusMember: &cpb.ConsensusMemberRole{}, KubernetesController: &cpb.KubernetesControllerRole{}, KubernetesWorker: &cpb.KubernetesWorkerRole{}}
	script := filepath.Join(t.TempDir(), "polis-kube")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	notExec := filepath.Join(t.TempDir(), "polis-kube")
	if err := os.WriteFile(notExec, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		bundle string
		want   string
	}{
		{"no bundle", "", noteNoBundle},
		{"missing bundle", "/nonexistent/polis-kube", "/nonexistent/polis-kube"},
		{"bundle not executable", notExec, "not an executable file"},
		{"no consensus member yet", script, noteNoConsensus},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := NewValues()
			var g Graph
			cfg := KubernetesConfig{Bundle: tc.bundle, Dir: t.TempDir()}
			supervisortest.Harness(t, newWorkerKubernetes(&g, v, cfg, kubeAddr).run)
			if st := waitFor(t, &v.Kubernetes, "nil before the roles are known", func(*KubernetesStatus) bool { return true }); st != nil {
				t.Errorf("status %+v before the roles are known", st)
			}
			v.LocalControlPlane.Set(nil)
			v.LocalRoles.Set(both)
			st := waitFor(t, &v.Kubernetes, "both roles", func(s *KubernetesStatus) bool { return s != nil && s.Controller })
			if len(st.Running) != 0 || st.Ready || st.APIServer.IsValid() {
				t.Errorf("status %+v claims something runs", st)
			}
			if !strings.Contains(st.ControllerNote, tc.want) || !strings.HasPrefix(st.ControllerNote, map[bool]string{true: "starting", false: "not available"}[tc.want == noteNoConsensus]) {
				t.Errorf("controller note %q, want it to say %q", st.ControllerNote, tc.want)
			}
			if s := st.String(); !strings.Contains(s, "nothing running") {
				t.Errorf("summary %q does not say that nothing runs", s)
			}

			v.LocalRoles.Set(workerRoles)
			st = waitFor(t, &v.Kubernetes, "the worker role alone", func(s *KubernetesStatus) bool { return !s.Controller })
			if st.ControllerNote != "" || kubernetesProto(st, nil) != nil {
				t.Errorf("status %+v without roles", st)
			}
		})
	}
}

func TestKubernetesConfig(t *testing.T) {
	for _, c := range []KubernetesConfig{
		{Bundle: "polis-kube", Dir: "/run/kube"},
		{Bundle: "/bin/polis-kube"},
		{Bundle: "/bin/polis-kube", Dir: "kube"},
		{Bundle: "/bin/polis-kube", Dir: "/" + strings.Repeat("d", 100)},
	} {
		if err := c.validate(); err == nil {
			t.Errorf("config %+v accepted", c)
		}
	}
	if err := (&KubernetesConfig{}).validate(); err != nil {
		t.Errorf("no Kubernetes: %v", err)
	}
}

// A note is cut at a rune boundary, so the reported status stays valid
// UTF-8.
func TestTruncateNote(t *testing.T) {
	long := strings.Repeat("é", maxNoteLen)
	got := truncateNote(long)
	if len(got) > maxNoteLen || !strings.HasSuffix(got, "...") || !strings.HasPrefix(long, strings.TrimSuffix(got, "...")) {
		t.Errorf("truncated to %q (%d bytes)", got, len(got))
	}
	if s := "short"; truncateNote(s) != s {
		t.Errorf("a short note was changed")
	}
}
