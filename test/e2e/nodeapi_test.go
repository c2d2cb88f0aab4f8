package e2e

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	nodev1 "github.com/polis-os/polis/api/node/v1"
	"github.com/polis-os/polis/internal/clustertest"
	"github.com/polis-os/polis/internal/testutil"
)

// The node API through the real binaries: polisctl node services and logs
// find a launched node through the cluster directory, and polisctl node
// reboot makes the polis-node process stop its runnables and execute
// itself again, in the same process (the launcher's handle stays valid).
func TestNodeReboot(t *testing.T) {
	c := launchCluster(t, 1, false, testLeaseTTL, 0, nil)
	nodes, err := listNodes(c.ConfigDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 1 {
		t.Fatalf("%d nodes listed, want 1", len(nodes))
	}
	var id string
	for k := range nodes {
		id = k
	}
	tree := func() (*nodev1.GetSupervisorTreeResponse, error) {
		out, err := polisctl(c.ConfigDir, "node", "services", id, "-o", "json")
		if err != nil {
			return nil, err
		}
		var resp nodev1.GetSupervisorTreeResponse
		return &resp, clustertest.UnmarshalJSON(out, &resp)
	}
	before, err := tree()
	if err != nil {
		t.Fatal(err)
	}
	started := before.Runnables[0].Since.AsTime()
	out, err := polisctl(c.ConfigDir, "node", "logs", id, "--runnable", "root.roleserve", "-n", "20")
	if err != nil || !strings.Contains(string(out), "root.roleserve") {
		t.Fatalf("node logs: %v\n%s", err, out)
	}

	pid := c.Nodes[0].PID()
	if out, err := polisctl(c.ConfigDir, "node", "reboot", id); err != nil || !strings.Contains(string(out), "is rebooting") {
		t.Fatalf("node reboot: %v: %s", err, out)
	}
	testutil.Eventually(t, time.Minute, "the node's tree restarted and serving", func() error {
		after, err := tree()
		if err != nil {
			return err
		}
		if root := after.Runnables[0]; !root.Since.AsTime().After(started) {
			return fmt.Errorf("root since %v, as before the reboot", root.Since.AsTime())
		}
		for _, r := range after.Runnables {
			if r.Name == "root.roleserve.heartbeat" && r.State == nodev1.RunnableState_RUNNABLE_STATE_HEALTHY {
				return nil
			}
		}
		return errors.New("heartbeat not healthy yet")
	})
	if now := c.Nodes[0].PID(); now != pid {
		t.Errorf("the node's process is %d after the reboot, was %d: the agent should execute itself in place", now, pid)
	}
	log, err := os.ReadFile(c.Nodes[0].Log)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(log), "starting the node agent"); n != 2 {
		t.Errorf("the node agent started %d times, want 2:\n%s", n, log)
	}
}
