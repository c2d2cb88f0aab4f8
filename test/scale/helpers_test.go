package scale

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/launch"
	"github.com/polis-os/polis/nodeapi"
)

// enrol takes n simulated nodes through registration as real nodes go:
// Register with the ticket (as a key holder, at the leader), the owner's
// approval, CommitRegistration for the node certificate.
func enrol(ctx context.Context, f *fleet, mgmt cpb.ManagementServiceClient, leader fmt.Stringer, n int) error {
	t, err := mgmt.GetRegisterTicket(ctx, &cpb.GetRegisterTicketRequest{})
	if err != nil {
		return fmt.Errorf("GetRegisterTicket: %w", err)
	}
	ca, err := x509.ParseCertificate(t.ClusterDirectory.GetCaCertificate())
	if err != nil {
		return err
	}
	v, err := identity.NewVerifier(ca)
	if err != nil {
		return err
	}
	f.nodes = make([]*simNode, n)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	limit := make(chan struct{}, 16) // well below the curator's limit of NEW nodes
	for i := range n {
		limit <- struct{}{}
		wg.Add(1)
		do := func() error {
			key, err := identity.GenerateKey()
			if err != nil {
				return err
			}
			cfg, err := identity.KeyHolderClientConfig(v, key)
			if err != nil {
				return err
			}
			conn, err := grpc.NewClient(leader.String(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
			if err != nil {
				return err
			}
			defer conn.Close()
			cur := cpb.NewCuratorServiceClient(conn)
			reg, err := cur.Register(ctx, &cpb.RegisterRequest{RegisterTicket: t.RegisterTicket, Status: simStatus(i)})
			if err != nil {
				return fmt.Errorf("Register: %w", err)
			}
			if _, err := mgmt.ApproveNode(ctx, &cpb.ApproveNodeRequest{NodeId: reg.NodeId}); err != nil {
				return fmt.Errorf("ApproveNode: %w", err)
			}
			resp, err := cur.CommitRegistration(ctx, &cpb.CommitRegistrationRequest{})
			if err != nil {
				return fmt.Errorf("CommitRegistration: %w", err)
			}
			cert, err := x509.ParseCertificate(resp.NodeCertificate)
			if err != nil {
				return err
			}
			f.nodes[i], err = newSimNode(key, cert, v)
			return err
		}
		go func() {
			defer func() { <-limit; wg.Done() }()
			if err := do(); err != nil {
				cancel(err)
			}
		}()
	}
	wg.Wait()
	return context.Cause(ctx)
}

// simStatus is what a simulated node reports: as much as a real node
// does, so that records have a real node's size.
func simStatus(i int) *cpb.NodeStatus {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	boot := fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
	// Addresses nothing dials: the records only carry them.
	return &cpb.NodeStatus{ExternalAddress: fmt.Sprintf("127.86.%d.%d", 200+i/250, 1+i%250), Version: "v0.0.0-scale", BootId: boot}
}

// roleTiming is how long one role change took.
type roleTiming struct {
	// mutation is from the call to its acknowledgement; toNode from the
	// call to the change reaching the node's own Watch, afterAck from
	// the acknowledgement to that (0 if it came first).
	mutation, toNode, afterAck time.Duration
}

// changeRole toggles KubernetesWorker on n and times it (roleTiming).
func changeRole(ctx context.Context, mgmt cpb.ManagementServiceClient, n *simNode) (roleTiming, error) {
	want := !n.worker.Load()
	for len(n.roleSeen) > 0 {
		<-n.roleSeen
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := mgmt.UpdateNodeRoles(cctx, &cpb.UpdateNodeRolesRequest{NodeId: n.id, KubernetesWorker: proto.Bool(want)}); err != nil {
		return roleTiming{}, fmt.Errorf("UpdateNodeRoles: %w", err)
	}
	acked := time.Now()
	for {
		select {
		case at := <-n.roleSeen:
			if n.worker.Load() == want {
				return roleTiming{mutation: acked.Sub(start), toNode: at.Sub(start), afterAck: max(at.Sub(acked), 0)}, nil
			}
		case <-cctx.Done():
			return roleTiming{}, fmt.Errorf("the role change did not reach node %s: %w", n.id, cctx.Err())
		}
	}
}

// healthCounts lists the nodes and counts the simulated ones by health.
func healthCounts(ctx context.Context, mgmt cpb.ManagementServiceClient, f *fleet) (map[cpb.NodeHealth]int, error) {
	ours := map[string]bool{}
	for _, n := range f.nodes {
		ours[n.id] = true
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	s, err := mgmt.ListNodes(ctx, &cpb.ListNodesRequest{})
	if err != nil {
		return nil, fmt.Errorf("ListNodes: %w", err)
	}
	counts := map[cpb.NodeHealth]int{}
	for {
		m, err := s.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return counts, nil
			}
			return counts, fmt.Errorf("ListNodes: %w", err)
		}
		for _, n := range m.Nodes {
			if ours[n.Id] {
				counts[n.Health]++
			}
		}
	}
}

// settle lets the cluster run for d: the measurement window, not
// synchronisation.
func settle(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// cpuTimes is the CPU time (user and system) each process has used.
func cpuTimes(pids map[int]int) map[int]time.Duration {
	out := map[int]time.Duration{}
	for i, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		// After the command: state is field 3; utime and stime are 14
		// and 15, in clock ticks (USER_HZ, 100 on Linux).
		u, _ := strconv.ParseInt(fields[11], 10, 64)
		st, _ := strconv.ParseInt(fields[12], 10, 64)
		out[i] = time.Duration(u+st) * 10 * time.Millisecond
	}
	return out
}

// rssMiB is a process's resident memory.
func rssMiB(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb / 1024
		}
	}
	return 0
}

// curatorMetrics is what a curator's node says about its curator's calls
// and its etcd member.
type curatorMetrics struct {
	openWatches int
	// raftLeader is whether its etcd member leads the raft, hasLeader
	// whether it knows of a leader.
	raftLeader, hasLeader bool
	// answered is whether /metrics answered at all.
	answered bool
}

type metricsList []curatorMetrics

func (m metricsList) openWatches() int {
	n := 0
	for _, c := range m {
		n += c.openWatches
	}
	return n
}

// scrapeAll reads each node's /metrics (plain HTTP on loopback): the Watch
// and WatchClusterDirectory streams its curator has open are those started
// and not yet handled; its etcd member says whether it leads the raft.
func scrapeAll(c *launch.Cluster) metricsList {
	client := &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 10 * time.Second}
	out := make(metricsList, len(c.Nodes))
	for i, n := range c.Nodes {
		resp, err := client.Get(fmt.Sprintf("http://%s:%d/metrics", n.Address, nodeapi.DefaultMetricsPort))
		if err != nil {
			continue
		}
		var started, handled float64
		out[i].answered = true
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			switch line {
			case "etcd_server_is_leader 1":
				out[i].raftLeader = true
			case "etcd_server_has_leader 1":
				out[i].hasLeader = true
			}
			if !strings.Contains(line, `grpc_method="Watch"`) && !strings.Contains(line, `grpc_method="WatchClusterDirectory"`) {
				continue
			}
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				continue
			}
			switch {
			case strings.HasPrefix(line, "polis_curator_grpc_server_started_total{"):
				started += v
			case strings.HasPrefix(line, "polis_curator_grpc_server_handled_total{"):
				handled += v
			}
		}
		resp.Body.Close()
		out[i].openWatches = int(started - handled)
	}
	return out
}

// pct is the p-th percentile of ds (100: the largest).
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[min(max(i-1, 0), len(s)-1)].Round(10 * time.Microsecond)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// reader makes fenced reads (GetOwnerKey: SERVE_ANY, fenced on a quorum
// read, then a quorum read of its own) at one curator, one after the
// other, through its own connection with a simulated node's certificate,
// and keeps how long each took.
type reader struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu    sync.Mutex
	reads []read
}

type read struct {
	at     time.Time
	took   time.Duration
	failed bool
}

func startReader(ctx context.Context, f *fleet, curator int) *reader {
	ctx, cancel := context.WithCancel(ctx)
	r := &reader{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		conn, err := grpc.NewClient(f.curators[curator].String(), grpc.WithTransportCredentials(credentials.NewTLS(f.nodes[curator].tls)))
		if err != nil {
			return
		}
		defer conn.Close()
		cur := cpb.NewCuratorServiceClient(conn)
		for ctx.Err() == nil {
			start := time.Now()
			cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
			_, err := cur.GetOwnerKey(cctx, &cpb.GetOwnerKeyRequest{})
			ccancel()
			if ctx.Err() != nil {
				return
			}
			r.mu.Lock()
			r.reads = append(r.reads, read{at: start, took: time.Since(start), failed: err != nil})
			r.mu.Unlock()
			settle(ctx, 20*time.Millisecond) // the pace of reads, not synchronisation
		}
	}()
	return r
}

func (r *reader) stop() {
	r.cancel()
	<-r.done
}

// around counts the reads started from a second before t on, the longest
// of them and the failed ones.
func (r *reader) around(t time.Time) (n int, longest time.Duration, failed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rd := range r.reads {
		if rd.at.Before(t.Add(-time.Second)) {
			continue
		}
		n++
		longest = max(longest, rd.took)
		if rd.failed {
			failed++
		}
	}
	return n, longest, failed
}

// waitRaftLeader polls the nodes but killed until one's etcd member leads
// the raft, and returns how long after the kill it saw that (to the
// polling's 100 ms).
func waitRaftLeader(ctx context.Context, c *launch.Cluster, killed int, at time.Time) time.Duration {
	for ctx.Err() == nil && time.Since(at) < 5*time.Minute {
		for i, m := range scrapeAll(c) {
			if i != killed && m.raftLeader {
				return time.Since(at)
			}
		}
		settle(ctx, 100*time.Millisecond) // polling interval, not synchronisation
	}
	return -1
}

// maxRSS is the largest resident set of the processes, in MiB.
func maxRSS(pids map[int]int) int64 {
	var m int64
	for _, pid := range pids {
		m = max(m, rssMiB(pid))
	}
	return m
}
