package roleserve

import (
	"strings"
	"testing"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/supervisor"
)

// The status shows the Kubernetes roles and says that nothing runs.
func TestKubernetesIsHonest(t *testing.T) {
	v := NewValues()
	var g Graph
	supervisor.TestHarness(t, newWorkerKubernetes(&g, v).run)

	v.LocalRoles.Set(&cpb.Roles{KubernetesController: &cpb.KubernetesControllerRole{}, KubernetesWorker: &cpb.KubernetesWorkerRole{}})
	st := waitFor(t, &v.Kubernetes, "both roles", func(s *KubernetesStatus) bool { return s != nil && s.Controller && s.Worker })
	if len(st.Running) != 0 || !strings.Contains(st.Note, "not run yet") {
		t.Errorf("status %+v claims to run something, or does not say it does not", st)
	}

	v.LocalRoles.Set(workerRoles)
	waitFor(t, &v.Kubernetes, "the worker role alone", func(s *KubernetesStatus) bool { return !s.Controller && s.Worker })
	v.LocalRoles.Set(noRoles)
	waitFor(t, &v.Kubernetes, "no roles", func(s *KubernetesStatus) bool { return !s.Controller && !s.Worker })
}
