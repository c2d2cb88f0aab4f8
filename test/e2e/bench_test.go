package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/curator"
	"github.com/polis-os/polis/ownerdir"
)

// The cluster benchmarks time what an operator waits for, on real
// processes with the curator's default lease and heartbeat interval (what
// a user gets), except where a sub-benchmark says otherwise. Each
// iteration starts a fresh cluster; only the step named is timed, and the
// figure is reported as s/op (ns/op is set to the same time). Run them
// with a small fixed count, as in docs/benchmarks.md:
//
//	go test -run '^$' -bench . -benchtime=3x ./test/e2e/

// stamped records when each progress line was written.
type stamped struct {
	mu    sync.Mutex
	lines []string
	at    []time.Time
	buf   bytes.Buffer
}

func (s *stamped) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf.Write(p)
	for {
		line, err := s.buf.ReadString('\n')
		if err != nil {
			s.buf.WriteString(line)
			return len(p), nil
		}
		s.lines = append(s.lines, line)
		s.at = append(s.at, time.Now())
	}
}

// between is the time from the first line containing from to the first
// later line containing to.
func (s *stamped) between(tb testing.TB, from, to string) time.Duration {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, l := range s.lines {
		if !strings.Contains(l, from) {
			continue
		}
		for j := i + 1; j < len(s.lines); j++ {
			if strings.Contains(s.lines[j], to) {
				return s.at[j].Sub(s.at[i])
			}
		}
	}
	tb.Fatalf("no progress line %q followed by %q in:\n%s", from, to, strings.Join(s.lines, ""))
	return 0
}

// report sets the benchmark's result to total spread over b.N.
func report(b *testing.B, total time.Duration) {
	per := total / time.Duration(b.N)
	b.ReportMetric(per.Seconds(), "s/op")
	b.ReportMetric(float64(per.Nanoseconds()), "ns/op")
}

// One node, from its process starting to its curator issuing the owner
// certificate (which needs a bootstrapped etcd, the CA, and a leading
// curator).
func BenchmarkClusterBootstrap(b *testing.B) {
	var total time.Duration
	for range b.N {
		p := &stamped{}
		c := launchCluster(b, 1, false, 0, 0, p)
		total += p.between(b, "node 1 (", "curator serving")
		c.Close()
	}
	report(b, total)
}

// A second node, from its process starting with register parameters to
// the curator listing it UP and healthy: registration, the launcher's
// approval, commit, and the first heartbeat.
func BenchmarkRegisterApprove(b *testing.B) {
	var total time.Duration
	for range b.N {
		p := &stamped{}
		c := launchCluster(b, 2, false, 0, 0, p)
		second := c.Nodes[1].String()
		total += p.between(b, second+": started", second+": UP and healthy")
		c.Close()
	}
	report(b, total)
}

// The ConsensusMember role given to an UP node, until the curator lists it
// healthy with a running curator: the role change (etcd learner added),
// the node fetching its role, joining etcd, being promoted, starting its
// curator and reporting it.
func BenchmarkRoleAdded(b *testing.B) {
	var total time.Duration
	for range b.N {
		c := launchCluster(b, 2, false, 0, 0, io.Discard)
		start := time.Now()
		if err := c.MakeConsensusMember(context.Background(), c.Nodes[1]); err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
		c.Close()
	}
	report(b, total)
}

// The curator leader's node killed with SIGKILL in a cluster of three
// consensus members, until a change (UpdateNodeLabels, which only the
// leader serves) is served again by another curator: the lease running
// out, the election, and the client learning of the new leader. With the
// default lease and with the tests' short one. Meanwhile another
// goroutine reads (GetClusterInfo, which any curator serves) on the same
// connection in a loop; read-gap-s is the longest time between two served
// reads from the kill on, which is what a reader notices of the failover.
func BenchmarkLeaderKilled(b *testing.B) {
	for _, lease := range []time.Duration{curator.DefaultLeaseTTL, testLeaseTTL} {
		b.Run(fmt.Sprintf("lease=%v", lease), func(b *testing.B) {
			var total, gaps time.Duration
			for range b.N {
				c := launchCluster(b, 3, true, lease, 0, io.Discard)
				ctx := context.Background()
				leader, err := c.Leader(ctx)
				if err != nil {
					b.Fatal(err)
				}
				conn, err := ownerdir.Dial(c.ConfigDir)
				if err != nil {
					b.Fatal(err)
				}
				mgmt := cpb.NewManagementServiceClient(conn)
				cctx, cancel := context.WithTimeout(ctx, time.Minute)
				change := &cpb.UpdateNodeLabelsRequest{NodeId: leader.ID(), Set: map[string]string{"bench": "killed"}}
				// Connected to the leader before the kill, as a
				// long-running client would be.
				if _, err := mgmt.UpdateNodeLabels(cctx, change); err != nil {
					b.Fatal(err)
				}
				if _, err := mgmt.GetClusterInfo(cctx, &cpb.GetClusterInfoRequest{}); err != nil {
					b.Fatal(err)
				}
				readsDone := make(chan time.Duration)
				rctx, stopReads := context.WithCancel(cctx)
				start := time.Now()
				go func() {
					var gap time.Duration
					last := start
					for rctx.Err() == nil {
						if _, err := mgmt.GetClusterInfo(rctx, &cpb.GetClusterInfoRequest{}); err == nil {
							gap = max(gap, time.Since(last))
							last = time.Now()
						}
					}
					readsDone <- max(gap, time.Since(last))
				}()
				if err := leader.Kill(); err != nil {
					b.Fatal(err)
				}
				// The connection retries UNAVAILABLE on whichever curator
				// leads next, within the call's deadline.
				_, err = mgmt.UpdateNodeLabels(cctx, change)
				total += time.Since(start)
				stopReads()
				gap := <-readsDone
				gaps += gap
				cancel()
				conn.Close()
				if err != nil {
					b.Fatalf("no curator served after the leader died: %v", err)
				}
				if now, err := c.Leader(ctx); err != nil || now == leader {
					b.Fatalf("the leader after the kill is %v (%v)", now, err)
				}
				c.Close()
			}
			report(b, total)
			b.ReportMetric((gaps / time.Duration(b.N)).Seconds(), "read-gap-s")
		})
	}
}
