package roleserve

import (
	"context"
	"crypto/ed25519"
	"errors"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/curator"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/event/memory"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/internal/testutil"
)

func TestMain(m *testing.M) {
	// The controlplane test runs real consensus members.
	goleak.VerifyTestMain(m, testutil.EtcdLeakOptions()...)
}

// fakeCurator serves CuratorService in memory. Tests set the nodes its Watch
// streams, and wait on the calls it recorded through its event values, never
// by sleeping.
type fakeCurator struct {
	cpb.UnimplementedCuratorServiceServer

	// nodes is the cluster as Watch streams it.
	nodes memory.Value[[]*cpb.Node]
	// statuses are the statuses received by UpdateNodeStatus, in order.
	statuses memory.Value[[]*cpb.NodeStatus]
	// heartbeats are the times heartbeats arrived, in order.
	heartbeats memory.Value[[]time.Time]
	// directory is the curators WatchClusterDirectory streams.
	directory memory.Value[[]*cpb.CuratorEndpoint]
	// watches counts the Watch and WatchClusterDirectory calls received.
	watches memory.Value[int]
	// interval is the heartbeat interval the fake asks for.
	interval time.Duration
	// kubelet answers IssueKubeletCredentials, if set.
	kubelet *kubeletIssuer

	mu      sync.Mutex
	streams map[*context.CancelCauseFunc]struct{}
	// failUpdates and failHeartbeats make as many of the next calls
	// fail.
	failUpdates, failHeartbeats int
}

var errBroken = errors.New("fake curator: watches broken by the test")

func newFakeCurator() *fakeCurator {
	f := &fakeCurator{interval: time.Hour, streams: map[*context.CancelCauseFunc]struct{}{}}
	f.nodes.Name = "fake-nodes"
	f.statuses.Name = "fake-statuses"
	f.heartbeats.Name = "fake-heartbeats"
	f.watches.Name = "fake-watches"
	f.directory.Name = "fake-directory"
	f.directory.Set(nil)
	f.nodes.Set(nil)
	f.statuses.Set(nil)
	f.heartbeats.Set(nil)
	f.watches.Set(0)
	return f
}

// serveCurator serves s as CuratorService on an in-memory listener for
// the duration of the test. Register it before the test harness, so that
// it stops after the workers.
func serveCurator(t *testing.T, s cpb.CuratorServiceServer) *bufconn.Listener {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	cpb.RegisterCuratorServiceServer(srv, s)
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return lis
}

// dialFake connects to a fake served on lis, without TLS.
func dialFake(t *testing.T, lis *bufconn.Listener) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///fake-curator",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dialling the fake curator: %v", err)
	}
	return conn
}

// fakeMembership serves a fake curator and returns a membership that
// reaches it, with creds.
func fakeMembership(t *testing.T, f cpb.CuratorServiceServer, creds *Credentials) *ClusterMembership {
	t.Helper()
	conn := dialFake(t, serveCurator(t, f))
	t.Cleanup(func() { conn.Close() })
	return &ClusterMembership{Credentials: creds, Curator: conn}
}

func (f *fakeCurator) UpdateNodeStatus(_ context.Context, req *cpb.UpdateNodeStatusRequest) (*cpb.UpdateNodeStatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failUpdates > 0 {
		f.failUpdates--
		return nil, status.Error(codes.Unavailable, "fake curator: failing as the test asked")
	}
	f.statuses.Set(append(slices.Clone(latest(&f.statuses)), req.GetStatus()))
	return &cpb.UpdateNodeStatusResponse{}, nil
}

func (f *fakeCurator) Heartbeat(context.Context, *cpb.HeartbeatRequest) (*cpb.HeartbeatResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failHeartbeats > 0 {
		f.failHeartbeats--
		return nil, status.Error(codes.Unavailable, "fake curator: failing as the test asked")
	}
	f.heartbeats.Set(append(slices.Clone(latest(&f.heartbeats)), time.Now()))
	return &cpb.HeartbeatResponse{Interval: durationpb.New(f.interval)}, nil
}

// Watch streams the matching nodes like the curator does: the initial
// state, then changes (here, every matching node again, and tombstones for
// the ones that went), until the test breaks the stream.
func (f *fakeCurator) Watch(req *cpb.WatchRequest, srv cpb.CuratorService_WatchServer) error {
	ctx := f.openStream(srv.Context())
	w := f.nodes.Watch()
	defer w.Close()
	sent := map[string]bool{}
	first := true
	for {
		nodes, err := w.Get(ctx)
		if err != nil {
			if errors.Is(context.Cause(ctx), errBroken) {
				return status.Error(codes.Unavailable, errBroken.Error())
			}
			return err
		}
		msg := &cpb.WatchResponse{InitialStateComplete: first}
		now := map[string]bool{}
		for _, n := range nodes {
			if id := req.GetNodeId(); id != "" && n.GetId() != id {
				continue
			}
			msg.Nodes = append(msg.Nodes, n)
			now[n.GetId()] = true
		}
		for id := range sent {
			if !now[id] {
				msg.NodeTombstones = append(msg.NodeTombstones, &cpb.NodeTombstone{NodeId: id})
			}
		}
		sent, first = now, false
		if err := srv.Send(msg); err != nil {
			return err
		}
	}
}

// WatchClusterDirectory streams f.directory, each of its values once,
// until the test breaks the stream.
func (f *fakeCurator) WatchClusterDirectory(_ *cpb.WatchClusterDirectoryRequest, srv cpb.CuratorService_WatchClusterDirectoryServer) error {
	ctx := f.openStream(srv.Context())
	w := f.directory.Watch()
	defer w.Close()
	for {
		curators, err := w.Get(ctx)
		if err != nil {
			if errors.Is(context.Cause(ctx), errBroken) {
				return status.Error(codes.Unavailable, errBroken.Error())
			}
			return err
		}
		if err := srv.Send(&cpb.WatchClusterDirectoryResponse{Directory: &cpb.ClusterDirectory{Curators: curators}}); err != nil {
			return err
		}
	}
}

// openStream counts a new stream and returns its context, which
// breakWatches cancels and which ends with the stream's.
func (f *fakeCurator) openStream(streamCtx context.Context) context.Context {
	ctx, cancel := context.WithCancelCause(streamCtx)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.streams[&cancel] = struct{}{}
	f.watches.Set(latest(&f.watches) + 1)
	context.AfterFunc(ctx, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(f.streams, &cancel)
	})
	return ctx
}

// breakWatches ends every open Watch stream with UNAVAILABLE, as a curator
// that steps down does.
func (f *fakeCurator) breakWatches() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for cancel := range f.streams {
		(*cancel)(errBroken)
	}
}

// latest reads an in-memory value that is known to be set.
func latest[T any](v *memory.Value[T]) T {
	d, err := event.Get(context.Background(), v)
	if err != nil {
		panic(err)
	}
	return d
}

// waitFor waits until v satisfies pred and returns that data.
func waitFor[T any](t *testing.T, v event.ValueWatch[T], what string, pred func(T) bool) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := event.Get(ctx, v, event.Filter(pred))
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
	return d
}

// testCredentials are real credentials of a node in a new, in-memory
// cluster.
func testCredentials(t *testing.T) *Credentials {
	t.Helper()
	ca, err := identity.NewCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	key, err := identity.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	pub := key.Public().(ed25519.PublicKey)
	cert, err := ca.IssueNode(pub, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return &Credentials{NodeID: identity.NodeID(pub), Key: key, Certificate: cert, CACertificate: ca.Certificate()}
}

// fakeLocalCurator is a local curator that serves only its status.
type fakeLocalCurator struct {
	status memory.Value[*curator.Status]
	leader memory.Value[*curator.LeaderStatus]
}

func (c *fakeLocalCurator) Status() event.ValueWatch[*curator.Status]       { return &c.status }
func (c *fakeLocalCurator) Leader() event.ValueWatch[*curator.LeaderStatus] { return &c.leader }

// servingStatus is the status of a curator of node id serving at addr.
func servingStatus(id, addr string) *curator.Status {
	return &curator.Status{NodeID: id, Address: netip.MustParseAddrPort(addr)}
}

// node is an UP node record.
func node(id string, roles *cpb.Roles, st *cpb.NodeStatus) *cpb.Node {
	return &cpb.Node{Id: id, State: cpb.NodeState_NODE_STATE_UP, Roles: roles, Status: st}
}

func protoEq[M proto.Message](want M) func(M) bool {
	return func(got M) bool { return proto.Equal(got, want) }
}
