package clustertest

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	cpb "github.com/polis-os/polis/api/curator/v1"
)

// Check says why one node's record is not yet what a suite awaits, or nil.
type Check func(*cpb.Node) error

// HealthyUp checks that the node is UP and healthy.
func HealthyUp(n *cpb.Node) error {
	if n == nil {
		return errors.New("not listed")
	}
	if n.State != cpb.NodeState_NODE_STATE_UP || n.Health != cpb.NodeHealth_NODE_HEALTH_HEALTHY {
		return fmt.Errorf("%s is %v and %v", n.Id, n.State, n.Health)
	}
	return nil
}

// CuratorServing checks that the node is UP and healthy, holds the
// consensus member role and runs a curator.
func CuratorServing(n *cpb.Node) error {
	if err := HealthyUp(n); err != nil {
		return err
	}
	if n.Roles.GetConsensusMember() == nil || n.Status.GetRunningCurator() == nil {
		return fmt.Errorf("%s: consensus member %v, running curator %v", n.Id, n.Roles.GetConsensusMember() != nil, n.Status.GetRunningCurator() != nil)
	}
	return nil
}

// NewBoot checks, for the nodes in old (node ID → boot ID), that the node
// reports another boot than old's: which tells the record of a node that
// came back from the stale one of before it went down.
func NewBoot(old map[string]string) Check {
	return func(n *cpb.Node) error {
		if b, ok := old[n.GetId()]; ok && n.GetStatus().GetBootId() == b {
			return fmt.Errorf("%s still reports the boot %.8s of before", n.GetId(), b)
		}
		return nil
	}
}

// BootIDs are the nodes' current boot IDs, by node ID, for NewBoot.
func BootIDs(recs map[string]*cpb.Node) map[string]string {
	m := map[string]string{}
	for id, r := range recs {
		m[id] = r.GetStatus().GetBootId()
	}
	return m
}

// ByID returns the node list by node ID.
func ByID(nodes []*cpb.Node) map[string]*cpb.Node {
	m := make(map[string]*cpb.Node, len(nodes))
	for _, n := range nodes {
		m[n.Id] = n
	}
	return m
}

// Whole says why recs (the node list, by node ID) is not a whole cluster
// of want nodes, each passing every check; nil if it is. The error names
// every node still awaited, in the order of their IDs.
func Whole(recs map[string]*cpb.Node, want int, checks ...Check) error {
	var waiting []string
	if len(recs) != want {
		waiting = append(waiting, fmt.Sprintf("%d nodes listed, want %d", len(recs), want))
	}
	ids := make([]string, 0, len(recs))
	for id := range recs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		for _, check := range checks {
			if err := check(recs[id]); err != nil {
				waiting = append(waiting, err.Error())
				break
			}
		}
	}
	if len(waiting) > 0 {
		return errors.New(strings.Join(waiting, "; "))
	}
	return nil
}
