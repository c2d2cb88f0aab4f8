package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/polis-os/polis/internal/clustertest"
	"github.com/polis-os/polis/launch"
)

// processMode is how the scenarios of internal/clustertest, written once
// for processes and VMs, treat processes: a node asked to reboot executes
// itself again in the same process, so it counts as down from when its
// node API accepted the reboot; nothing is searched while the cluster is
// off (a process's storage is a plain directory).
var processMode = clustertest.Mode{Reboot: rebootProcess, LeaseTTL: testLeaseTTL}

// rebootProcess asks n to reboot through polisctl, as test/vm does for
// VMs, and returns when its node API accepted: the agent stops its
// runnables at once and executes itself again.
func rebootProcess(ctx context.Context, t *testing.T, c *launch.Cluster, n *launch.Node) time.Time {
	t.Helper()
	out, err := clustertest.Polisctl{ConfigDir: c.ConfigDir, Binary: bin.ctl}.Run(ctx, "node", "reboot", n.ID())
	if err != nil || !strings.Contains(string(out), "is rebooting") {
		t.Fatalf("polisctl node reboot %s: %v: %s", n.ID(), err, out)
	}
	return time.Now()
}

// TestScenarios runs the scenarios test/vm runs on VMs on processes: three
// consensus members, every one rebooted in turn under a writer (HA), then
// all powered off at once and started again (cold start). Each leaves a
// whole cluster for the next.
func TestScenarios(t *testing.T) {
	c := launchCluster(t, 3, true, testLeaseTTL, testHeartbeat, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for _, s := range []struct {
		name string
		f    func(context.Context, *testing.T, *launch.Cluster)
	}{{"HA", processMode.HA}, {"cold-start", processMode.ColdStart}} {
		if !t.Run(s.name, func(t *testing.T) { s.f(ctx, t, c) }) {
			t.FailNow()
		}
	}
}
