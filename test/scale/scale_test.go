// Package scale measures the control plane at thousands of nodes: three real
// curators (polis-node processes started by package launch, each a
// consensus member, so over a three-member etcd) and 1,000 simulated nodes
// in this process. Each simulated node registers, is approved and commits
// like a real one, then holds what a real node holds: its own mTLS
// connection with its own node certificate, a heartbeat at the interval
// the curator names (the default, 5 s; -scale.heartbeat changes it), a
// Watch of its own record (as rolefetch) and a WatchClusterDirectory
// stream (as clusterdirectory). -scale.nodes sets how many (5,000 is the
// issue 24 run, docs/benchmarks.md).
//
// The benchmark reports figures (docs/benchmarks.md, issues 13 and 24)
// and fails only when the cluster does not work. Run it alone, once:
//
//	go test -run '^$' -bench . -benchtime=1x -timeout 30m ./test/scale/
//
// TestSmallCluster is the same run with 30 nodes, in the ordinary test
// run: it checks what must hold at any size (no directory sent while no
// curator changes, no stream on a surviving curator ended by the leader's
// death), not figures.
//
// The simulated nodes spread their calls over the three curators by
// dialling each curator directly (node i talks to curator i mod 3, again
// after a broken session, and to the next one once its curator is
// killed): the curator client's
// balancing over all curators is not used, so the figures show the
// curators' side of an even spread. Clusters get 127.86.<n>.1–3, used by
// nothing else in the repository.
package scale

import (
	"testing"
	"time"

	"github.com/polis-os/polis/internal/testutil"
)

func TestMain(m *testing.M) {
	// Streams and connections end asynchronously after Close; give them
	// a moment, then insist that nothing is left.
	testutil.VerifyTestMainWithin(m, 30*time.Second)
}

var subnets = testutil.Subnets{Octet: 86}
