package curator

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/identity"
)

// putNodes stores n UP node records and waits until the node cache holds
// them all.
func (b *watchBench) putNodes(tb testing.TB, n int) []*cpb.Node {
	tb.Helper()
	var nodes []*cpb.Node
	var ops []clientv3.Op
	flush := func() {
		if _, err := b.etcd.Txn(ctxT(tb)).Then(ops...).Commit(); err != nil {
			tb.Fatal(err)
		}
		ops = nil
	}
	for i := range n {
		node := randomNode(tb, i)
		op, err := putNodeOp(node)
		if err != nil {
			tb.Fatal(err)
		}
		nodes, ops = append(nodes, node), append(ops, op)
		if len(ops) == 100 { // etcd allows 128 operations per transaction
			flush()
		}
	}
	if len(ops) > 0 {
		flush()
	}
	if _, err := event.Get(ctxT(tb), b.rpc.s.nodes.Snapshots(), event.Filter(func(s *nodeSnapshot) bool {
		return s.complete && len(s.nodes) >= n+1 // and the watcher's own
	})); err != nil {
		tb.Fatal(err)
	}
	return nodes
}

// BenchmarkCuratorHeartbeat measures a heartbeat as the curator handles it
// for a cluster of 1,000 UP nodes, each heartbeating with its own identity:
// the authorization (method requirement, the caller's standing in the node
// cache, the leader state) and the handler. The TLS handshake and gRPC's
// transport are left out: the call enters through the unary interceptor
// with the caller's identity in its peer information, as
// identity.ServerCredentials would have put it there, so that the figure is
// the curator's own cost per heartbeat.
func BenchmarkCuratorHeartbeat(b *testing.B) {
	wb := newWatchBench(b)
	nodes := wb.putNodes(b, 1000)
	ctxs := make([]context.Context, len(nodes))
	for i, n := range nodes {
		id := identity.Identity{Kind: identity.KindNode, NodeID: n.Id, PublicKey: n.PublicKey, NotAfter: time.Now().Add(time.Hour)}
		ctxs[i] = peer.NewContext(context.Background(), &peer.Peer{AuthInfo: identity.AuthInfo{Identity: id}})
	}
	info := &grpc.UnaryServerInfo{FullMethod: cpb.CuratorService_Heartbeat_FullMethodName}
	handler := func(ctx context.Context, req any) (any, error) {
		return wb.rpc.Heartbeat(ctx, req.(*cpb.HeartbeatRequest))
	}
	req := &cpb.HeartbeatRequest{}
	intercept := wb.rpc.s.authzServer().UnaryInterceptor()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, err := intercept(ctxs[i%len(ctxs)], req, info, handler); err != nil {
				b.Error(err)
				return
			}
			i += 7 // spread the nodes over the goroutines
		}
	})
	b.StopTimer()
	if h, _ := wb.rpc.s.heartbeats.health(nodes[0].Id, time.Now()); h != cpb.NodeHealth_NODE_HEALTH_HEALTHY {
		b.Fatalf("after heartbeats: %v", h)
	}
}

// BenchmarkCuratorWatchInitialState measures how long a Watch of all nodes
// takes to deliver the initial state of a cluster of 1,000 nodes, from the
// request to the message that completes it (handler called directly, no
// gRPC; see newWatchBench).
func BenchmarkCuratorWatchInitialState(b *testing.B) {
	wb := newWatchBench(b)
	wb.putNodes(b, 1000)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		ctx, cancel := context.WithCancel(context.Background())
		f, done := wb.startWatch(ctx, allNodes())
		n := 0
		for m := range f.msgs {
			n += len(m.Nodes)
			if m.InitialStateComplete {
				break
			}
		}
		cancel()
		<-done
		if n != 1001 {
			b.Fatalf("initial state of %d nodes", n)
		}
	}
}

// BenchmarkCuratorWatchFanout measures how long a change to one node record
// takes to reach every one of N watchers of all nodes, in a cluster of
// 1,000 nodes: from the etcd write, through the node cache's one etcd
// watch, to the last watcher's message.
func BenchmarkCuratorWatchFanout(b *testing.B) {
	for _, watchers := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("watchers=%d", watchers), func(b *testing.B) {
			wb := newWatchBench(b)
			nodes := wb.putNodes(b, 1000)
			ctx, cancel := context.WithCancel(context.Background())
			var fs []*fakeWatchStream
			var dones []<-chan error
			for range watchers {
				f, done := wb.startWatch(ctx, allNodes())
				for m := range f.msgs {
					if m.InitialStateComplete {
						break
					}
				}
				fs, dones = append(fs, f), append(dones, done)
			}
			defer func() {
				cancel()
				for _, d := range dones {
					<-d
				}
			}()
			changed := nodes[0]
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				changed.Status.Version = fmt.Sprintf("v%d", i)
				wb.put(b, changed)
				for _, f := range fs {
					m := <-f.msgs
					if len(m.Nodes) != 1 || m.Nodes[0].Status.Version != changed.Status.Version {
						b.Fatalf("change %v", m)
					}
				}
			}
		})
	}
}

// BenchmarkCuratorListNodes measures ListNodes of 1,000 nodes as an
// operator sees it: over real gRPC and mTLS, through authorization, with
// health computed for each node, until the last batch has arrived.
func BenchmarkCuratorListNodes(b *testing.B) {
	c := newTestCluster(b)
	c.putRandomNodes(b, 1000)
	c.waitNodeCount(b, 1001)
	mgmt := cpb.NewManagementServiceClient(c.asOwner())
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		stream, err := mgmt.ListNodes(ctxT(b), &cpb.ListNodesRequest{})
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for {
			resp, err := stream.Recv()
			if err != nil {
				if err == io.EOF {
					break
				}
				b.Fatal(err)
			}
			n += len(resp.Nodes)
		}
		if n != 1001 {
			b.Fatalf("listed %d nodes", n)
		}
	}
}

// BenchmarkCuratorRoleChange measures one role change as the owner makes
// it (UpdateNodeRoles, KubernetesWorker given and taken in turns) on one
// of 1,001 nodes, over real gRPC and mTLS, through authorization, with a
// single-member etcd: so the figure is mostly the curator's round trips
// to etcd, which it also reports as etcd KV requests per change (from
// etcd's own gRPC metrics; requests by the curator's other work in the
// meantime are counted too).
func BenchmarkCuratorRoleChange(b *testing.B) {
	c := newTestCluster(b)
	ids := c.putRandomNodes(b, 1000)
	target := ids[len(ids)-1]
	c.waitNodeCount(b, 1001)
	mgmt := cpb.NewManagementServiceClient(c.asOwner())
	worker := false
	change := func() {
		if _, err := mgmt.UpdateNodeRoles(ctxT(b), &cpb.UpdateNodeRolesRequest{NodeId: target, KubernetesWorker: &worker}); err != nil {
			b.Fatal(err)
		}
		worker = !worker
	}
	change() // the connection, and the node's pod range (given once)
	change()
	before := etcdKVRequests(b)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		change()
	}
	b.StopTimer()
	b.ReportMetric(float64(etcdKVRequests(b)-before)/float64(b.N), "etcd-requests/op")
}

// etcdKVRequests is how many KV requests (Range, Txn, Put, ...) the etcd
// servers of this process have handled.
func etcdKVRequests(tb testing.TB) float64 {
	tb.Helper()
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	var n float64
	for _, f := range families {
		if f.GetName() != "grpc_server_handled_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "grpc_service" && l.GetValue() == "etcdserverpb.KV" {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// putRandomNodes writes n random node records straight to c's etcd, a
// hundred to a transaction, and returns their IDs in the order written.
func (c *testCluster) putRandomNodes(b testing.TB, n int) []string {
	b.Helper()
	var ops []clientv3.Op
	var ids []string
	for i := range n {
		node := randomNode(b, i)
		ids = append(ids, node.Id)
		op, err := putNodeOp(node)
		if err != nil {
			b.Fatal(err)
		}
		ops = append(ops, op)
		if len(ops) == 100 || i == n-1 {
			if _, err := c.etcd.Txn(ctxT(b)).Then(ops...).Commit(); err != nil {
				b.Fatal(err)
			}
			ops = nil
		}
	}
	return ids
}

// waitNodeCount waits until the curator's node cache holds n nodes.
func (c *testCluster) waitNodeCount(b testing.TB, n int) {
	b.Helper()
	if _, err := event.Get(ctxT(b), c.curator.nodes.Snapshots(), event.Filter(func(s *nodeSnapshot) bool { return len(s.nodes) == n })); err != nil {
		b.Fatalf("waiting for %d nodes in the curator's cache: %v", n, err)
	}
}
