package scale

import (
	"testing"
	"time"
)

// TestSmallCluster is the benchmark's run with 30 simulated nodes, as a
// test of what must hold at any size (the figures are the benchmark's):
// no directory reaches the nodes while no curator changes, however many
// role changes are made, and no stream on a surviving curator ends when
// the leader's process, whose etcd member usually leads the raft too, is
// killed.
func TestSmallCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster and 30 simulated nodes")
	}
	r := runScale(t, scaleConfig{nodes: 30, window: 10 * time.Second, roleChanges: 5})
	if n := r["directory-msgs"]; n != 0 {
		t.Errorf("%v directories were sent to the nodes while role changes were made and no curator changed; want none", n)
	}
	if n := r["kill-survivor-sessions-ended"]; n != 0 {
		t.Errorf("%v sessions on the surviving curators ended when the leader was killed; want none", n)
	}
}
