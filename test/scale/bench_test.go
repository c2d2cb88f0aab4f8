package scale

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/curator"
	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/launch"
	"github.com/polis-os/polis/ownerdir"
	"github.com/polis-os/polis/roleserve"
)

var (
	nodeCount   = flag.Int("scale.nodes", 1000, "simulated nodes")
	window      = flag.Duration("scale.window", time.Minute, "how long the steady state is measured")
	roleChanges = flag.Int("scale.role-changes", 100, "role changes timed in the steady state")
	heartbeat   = flag.Duration("scale.heartbeat", 0, "the heartbeat interval the curators name (0: the curator's default)")
)

// BenchmarkThousandNodes runs the cluster described in the package doc
// and reports, in the steady state: heartbeat latency, the time one role
// change takes to reach its node (from the operator's call, and from its
// acknowledgement) and every all-nodes watcher, each curator's CPU and
// memory and its share of heartbeats and Watch streams. Then it kills the
// leader's process with SIGKILL and reports what the nodes saw: health
// at the new leader at once, how long until a mutation is served and
// every node watches again, heartbeats that failed.
func BenchmarkThousandNodes(b *testing.B) {
	for range b.N {
		r := runScale(b, scaleConfig{nodes: *nodeCount, window: *window, roleChanges: *roleChanges, heartbeat: *heartbeat})
		for _, name := range slices.Sorted(maps.Keys(r)) {
			b.ReportMetric(r[name], name)
		}
	}
}

// scaleConfig is one run's size (the flags, for the benchmark).
type scaleConfig struct {
	nodes       int
	window      time.Duration
	roleChanges int
	heartbeat   time.Duration // 0: the curator's default
}

// results are a run's figures by metric name, as the benchmark reports
// them.
type results map[string]float64

func runScale(b testing.TB, cfg scaleConfig) results {
	res := results{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base := b.TempDir()
	c, err := launch.Launch(ctx, launch.Options{
		Nodes:             3,
		ConsensusMembers:  true,
		BaseDir:           base,
		Keep:              true,
		Addresses:         subnets.Addrs(3),
		StopTimeout:       20 * time.Second,
		HeartbeatInterval: cfg.heartbeat,
		Progress:          io.Discard,
	})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := c.Close(); err != nil {
			b.Errorf("stopping the cluster: %v", err)
		}
	}()
	owner, err := ownerdir.Dial(c.ConfigDir)
	if err != nil {
		b.Fatal(err)
	}
	defer owner.Close()
	mgmt := cpb.NewManagementServiceClient(owner)

	f := &fleet{dead: make([]atomic.Bool, len(c.Nodes)), interval: cmp.Or(cfg.heartbeat, curator.DefaultHeartbeatInterval)}
	pids := map[int]int{}
	for i, n := range c.Nodes {
		f.curators = append(f.curators, netip.AddrPortFrom(n.Address, roleserve.DefaultCuratorPort))
		pids[i] = n.PID()
	}
	leader, err := c.Leader(ctx)
	if err != nil {
		b.Fatal(err)
	}
	leaderIdx := leader.Index - 1

	start := time.Now()
	if err := enrol(ctx, f, mgmt, f.curators[leaderIdx], cfg.nodes); err != nil {
		b.Fatal(err)
	}
	say("%d nodes registered, approved and committed in %v", cfg.nodes, time.Since(start).Round(time.Millisecond))

	runCtx, stopFleet := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i, n := range f.nodes {
		n.home.Store(int32(i % len(f.curators)))
		wg.Add(1)
		go func() { defer wg.Done(); f.run(runCtx, n) }()
	}
	defer func() { stopFleet(); wg.Wait() }()
	start = time.Now()
	readyCtx, readyCancel := context.WithTimeout(ctx, 10*time.Minute)
	err = testutil.Poll(readyCtx, 2*time.Millisecond, testutil.Holds(func() bool { return f.ready.Load() == int64(len(f.nodes)) }))
	readyCancel()
	if err != nil {
		b.Fatalf("waiting for every node's watches: %d of %d ready: %v", f.ready.Load(), len(f.nodes), err)
	}
	say("every node holds its two streams after %v", time.Since(start).Round(time.Millisecond))
	// Two intervals for every node to have heartbeated and the initial
	// states to be long sent.
	settle(ctx, 2*f.interval)

	// The steady state.
	from := time.Now()
	cpu0 := cpuTimes(pids)
	dir0 := f.directoryMsgs.Load()
	var mutation, toNode, afterAck []time.Duration
	gap := cfg.window / time.Duration(cfg.roleChanges+1)
	for i := range cfg.roleChanges {
		settle(ctx, gap)
		rt, err := changeRole(ctx, mgmt, f.nodes[(i*37)%len(f.nodes)])
		if err != nil {
			b.Fatal(err)
		}
		mutation, toNode, afterAck = append(mutation, rt.mutation), append(toNode, rt.toNode), append(afterAck, rt.afterAck)
	}
	settle(ctx, time.Until(from.Add(cfg.window)))
	to := time.Now()
	cpu1 := cpuTimes(pids)
	beats, perCurator, failed := f.beatsBetween(from, to)
	metrics := scrapeAll(c)
	dirMsgs := f.directoryMsgs.Load() - dir0

	say("%d simulated nodes, 3 curators (each a polis-node process: etcd member, curator, node agent)", len(f.nodes))
	say("steady state over %v (leader: curator %d):", to.Sub(from).Round(time.Millisecond), leaderIdx+1)
	say("  heartbeats (interval %v): %d, latency p50 %v p99 %v max %v; failed: %d", f.interval, len(beats), pct(beats, 50), pct(beats, 99), pct(beats, 100), failed)
	say("  %d role changes: the mutation (call to acknowledgement) p50 %v p99 %v", len(mutation), pct(mutation, 50), pct(mutation, 99))
	say("    to its node's own Watch, from the call: p50 %v p99 %v max %v; from the acknowledgement: p50 %v p99 %v max %v", pct(toNode, 50), pct(toNode, 99), pct(toNode, 100), pct(afterAck, 50), pct(afterAck, 99), pct(afterAck, 100))
	say("    directories sent to the %d nodes meanwhile (no curator changed): %d", len(f.nodes), dirMsgs)
	for i := range c.Nodes {
		role := "follower"
		if i == leaderIdx {
			role = "leader"
		}
		say("  curator %d (%s): CPU %.1f%% of a core, RSS %d MiB, heartbeats %d (%.0f%%), open Watch streams %d (%.0f%%)", i+1, role,
			100*(cpu1[i]-cpu0[i]).Seconds()/to.Sub(from).Seconds(), rssMiB(pids[i]), perCurator[i], 100*float64(perCurator[i])/float64(max(len(beats), 1)),
			metrics[i].openWatches, 100*float64(metrics[i].openWatches)/float64(max(metrics.openWatches(), 1)))
	}
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	say("  this process (the simulated nodes): %d goroutines, max RSS %d MiB; load average %s", runtime.NumGoroutine(), ru.Maxrss/1024, loadAverage())
	f.sayEnded("sessions ended before the kill (retried on the same curator)")
	res["hb-p50-ms"] = ms(pct(beats, 50))
	res["hb-p99-ms"] = ms(pct(beats, 99))
	res["role-p50-ms"] = ms(pct(toNode, 50))
	res["role-p99-ms"] = ms(pct(toNode, 99))
	if l, err := strconv.ParseFloat(loadAverage(), 64); err == nil {
		res["load-avg"] = l
	}
	res["role-ack-p99-ms"] = ms(pct(afterAck, 99))
	res["directory-msgs"] = float64(dirMsgs)
	res["curator-max-rss-MiB"] = float64(maxRSS(pids))
	res["leader-watch-%"] = 100 * float64(metrics[leaderIdx].openWatches) / float64(max(metrics.openWatches(), 1))

	// The leader's process killed. The nodes on the other curators keep
	// their streams; those on the leader's move to the next curator.
	// Leadership may have moved under load: kill the one that leads now.
	if leader, err = c.Leader(ctx); err != nil {
		b.Fatal(err)
	}
	if leader.Index-1 != leaderIdx {
		say("  (the leadership moved during the steady state, to curator %d)", leader.Index)
		leaderIdx = leader.Index - 1
	}
	homed := 0
	for _, n := range f.nodes {
		if int(n.home.Load()) == leaderIdx {
			homed++
		}
	}
	raftLeader := -1
	for i, m := range scrapeAll(c) {
		if m.raftLeader {
			raftLeader = i
		}
	}
	// Fenced reads on each survivor, through a node's own connection,
	// before, during and after the election the kill may cause.
	reads := make([]*reader, len(c.Nodes))
	for i := range c.Nodes {
		if i != leaderIdx {
			reads[i] = startReader(ctx, f, i)
			defer reads[i].stop()
		}
	}
	settle(ctx, time.Second)
	moves0 := f.moves.Load()
	killed := time.Now()
	f.killedAt.Store(killed.UnixNano())
	f.dead[leaderIdx].Store(true)
	if err := c.Nodes[leaderIdx].Kill(); err != nil {
		b.Fatal(err)
	}
	electedCh := make(chan time.Duration, 1)
	go func() { electedCh <- waitRaftLeader(ctx, c, leaderIdx, killed) }()
	rewatchedCh := make(chan time.Duration, 1)
	go func() {
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Minute)
		defer rcancel()
		if err := testutil.Poll(rctx, 2*time.Millisecond, testutil.Holds(func() bool {
			return f.moves.Load()-moves0 >= int64(homed) && f.ready.Load() == int64(len(f.nodes))
		})); err != nil {
			rewatchedCh <- -1
			return
		}
		rewatchedCh <- time.Since(killed)
	}()
	// The next mutation, through a connection that follows the leader.
	mctx, mcancel := context.WithTimeout(ctx, time.Minute)
	_, err = mgmt.UpdateNodeRoles(mctx, &cpb.UpdateNodeRolesRequest{NodeId: f.nodes[1].id, KubernetesWorker: proto.Bool(!f.nodes[1].worker.Load())})
	mcancel()
	if err != nil {
		b.Fatalf("no mutation served after the leader was killed: %v", err)
	}
	mutationAfterKill := time.Since(killed)
	// Health, at once, as the new leader judges it.
	counts, err := healthCounts(ctx, mgmt, f)
	if err != nil {
		b.Fatal(err)
	}
	healthAt := time.Since(killed)
	rewatched := <-rewatchedCh
	if rewatched < 0 {
		b.Fatalf("after the kill: %d of %d nodes watch again", f.ready.Load(), len(f.nodes))
	}
	elected := <-electedCh
	settle(ctx, 15*time.Second)
	after, afterPer, afterFailed := f.beatsBetween(killed, time.Now())
	metrics = scrapeAll(c)
	say("leader (curator %d) killed with SIGKILL; its etcd member led the raft: %t", leaderIdx+1, raftLeader == leaderIdx)
	say("  a survivor's etcd member leads the raft %v after the kill", elected.Round(time.Millisecond))
	for i, r := range reads {
		if r == nil {
			continue
		}
		n, longest, failedReads := r.around(killed)
		say("  fenced reads (GetOwnerKey) at curator %d from 1 s before the kill: %d, the longest %v, failed %d", i+1, n, longest.Round(time.Millisecond), failedReads)
		res[fmt.Sprintf("kill-read-max-s-%d", i+1)] = longest.Seconds()
	}
	say("  next mutation (a role change, through a leader-following connection) served after %v", mutationAfterKill.Round(time.Millisecond))
	say("  health of the %d simulated nodes at the new leader, %v after the kill: %v", len(f.nodes), healthAt.Round(time.Millisecond), counts)
	say("  the %d nodes of the killed curator watching again on the others after %v; reconnections: %d (the others' streams stayed)", homed, rewatched.Round(time.Millisecond), f.moves.Load()-moves0)
	say("  heartbeats in the %v after the kill: %d, p50 %v p99 %v max %v; failed: %d", time.Since(killed).Round(time.Second), len(after), pct(after, 50), pct(after, 99), pct(after, 100), afterFailed)
	for i := range c.Nodes {
		if i == leaderIdx {
			continue
		}
		say("  curator %d: heartbeats %d, open Watch streams %d, RSS %d MiB", i+1, afterPer[i], metrics[i].openWatches, rssMiB(pids[i]))
	}
	say("  Watch streams ended by the leader change (sessions on the surviving curators that ended after the kill, 2 streams each): %d", f.survivorEnded.Load())
	f.sayEnded("sessions ended in all")
	res["kill-survivor-sessions-ended"] = float64(f.survivorEnded.Load())
	res["kill-raft-elected-s"] = elected.Seconds()
	res["kill-mutation-s"] = mutationAfterKill.Seconds()
	res["kill-rewatch-s"] = rewatched.Seconds()
	res["kill-healthy-nodes"] = float64(counts[cpb.NodeHealth_NODE_HEALTH_HEALTHY])
	res["kill-curator-max-rss-MiB"] = float64(maxRSS(pids))
	res["kill-hb-p99-ms"] = ms(pct(after, 99))
	return res
}

// say prints a line of the report. Benchmarks' own log is cut after a few
// lines, so the report goes to standard output.
func say(format string, args ...any) {
	fmt.Printf("    "+format+"\n", args...)
}

// sayEnded reports why sessions ended so far.
func (f *fleet) sayEnded(what string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.ended {
		n += c
	}
	say("  %s: %d", what, n)
	for msg, c := range f.ended {
		say("    %d× %s", c, msg)
	}
}

// loadAverage is the machine's one-minute load average, for the record.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Fields(string(b))[0]
}
