package curator

import (
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/event/memory"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/supervisor"
)

// StatusName is the name of a Service's status value (event.Info), by
// which the role server's graph and the node API know it.
const StatusName = "curator.status"

// Service is one curator. Make it with New and run it with Run under a
// supervisor.
type Service struct {
	cfg      Config
	nodeID   string
	election *Election
	nodes    *nodeCache
	// heartbeats is what this curator knows of every node's heartbeats.
	heartbeats *heartbeatBook
	status     memory.Value[*Status]
	// leader is this curator's leader state while it leads, nil otherwise.
	leader memory.Value[*leaderState]
	// logger is the logger of the current run, for RPC handlers, which run
	// outside the supervisor's tree.
	logger atomic.Pointer[zap.Logger]
	// renewAt says when the curator certificate in use is due for
	// renewal: identity.RenewAt, or sooner in tests.
	renewAt func(*x509.Certificate) time.Time
}

// MaxRequestSize is the largest request message a curator accepts; larger
// ones are refused with RESOURCE_EXHAUSTED before they are decoded. The
// largest real requests (64 labels set at once, a list of node IDs) take
// a few tens of KiB.
const MaxRequestSize = 256 << 10

// MinClientPingInterval is the most often a client may ping an idle
// connection; gRPC closes connections that ping more often.
const MinClientPingInterval = 5 * time.Second

// Status is what a running curator publishes about itself.
type Status struct {
	// NodeID is the ID of this curator's node.
	NodeID string
	// Address is the address it serves on (IP:port), with the port
	// resolved when Config.ListenAddress asked for port 0.
	Address netip.AddrPort
	// CACertificate is the cluster CA's certificate (DER).
	CACertificate []byte
}

// New validates cfg and returns a curator ready to Run.
func New(cfg Config) (*Service, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	id := identity.NodeID(cfg.NodeKey.Public().(ed25519.PublicKey))
	s := &Service{
		cfg:        cfg,
		nodeID:     id,
		nodes:      newNodeCache(cfg.Client),
		heartbeats: newHeartbeatBook(cfg.Client, id, cfg.HeartbeatInterval, cfg.Now),
		// renewAt is a field so that tests can make renewal due sooner.
		renewAt: identity.RenewAt,
	}
	s.election = &Election{Client: cfg.Client, LeaseTTL: cfg.LeaseTTL}
	s.election.LeaderGone = s.leaderGone
	s.election.LeaderAddress = curatorAddress
	s.status.Name = StatusName
	s.leader.Name = "curator-leader"
	// Not leading until the election says so; set now so that reading it
	// never waits.
	s.leader.Set(nil)
	return s, nil
}

// rpcLogger is the logger for RPC handlers.
func (s *Service) rpcLogger() *zap.Logger {
	if l := s.logger.Load(); l != nil {
		return l
	}
	return zap.NewNop()
}

// Status is the curator's status: unset until it first serves, set while
// it serves, nil once it stopped (until a new Run serves again).
func (s *Service) Status() event.ValueWatch[*Status] { return &s.status }

// Leader is this curator's view of the leadership.
func (s *Service) Leader() event.ValueWatch[*LeaderStatus] {
	return s.election.Status()
}

// Run serves the curator until ctx is cancelled: it elects, keeps the node
// cache, and answers RPCs over mTLS.
func (s *Service) Run(ctx context.Context) error {
	s.logger.Store(supervisor.Logger(ctx).Named("rpc"))
	ca, err := identity.LoadCA(ctx, s.cfg.Client)
	if err != nil {
		if errors.Is(err, identity.ErrNoCA) {
			return fmt.Errorf("the cluster state is not initialised (no CA): bootstrap it first: %w", err)
		}
		return fmt.Errorf("loading the cluster CA: %w", err)
	}
	l, err := net.Listen("tcp", s.cfg.ListenAddress)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", s.cfg.ListenAddress, err)
	}
	lis := newClosingListener(l)
	defer lis.Close()
	addr := netip.MustParseAddrPort(lis.Addr().String())

	tlsCert, err := s.curatorCertificate(ctx, ca, addr.Addr())
	if err != nil {
		return err
	}
	serving, err := identity.NewServingCertificate(ca.Verifier(), tlsCert)
	if err != nil {
		return fmt.Errorf("curator TLS: %w", err)
	}
	creds, err := identity.ServerCredentials(ca.Verifier(), serving)
	if err != nil {
		return fmt.Errorf("curator TLS: %w", err)
	}

	candidate, err := proto.Marshal(&cpb.CuratorEndpoint{NodeId: s.nodeID, Address: addr.Addr().String(), Port: uint32(addr.Port())})
	if err != nil {
		return err
	}
	// The candidate names the address just bound; the election does not
	// run before this, so nothing reads it earlier.
	s.election.setCandidate(candidate)
	if err := supervisor.Run(ctx, "nodes", s.nodes.run); err != nil {
		return err
	}
	if err := supervisor.Run(ctx, "heartbeats", s.heartbeats.follow); err != nil {
		return err
	}
	if err := supervisor.Run(ctx, "heartbeat-record", s.heartbeats.record); err != nil {
		return err
	}
	if err := supervisor.Run(ctx, "election", s.election.Run); err != nil {
		return err
	}
	if err := supervisor.Run(ctx, "leader", func(ctx context.Context) error { return s.runLeader(ctx, ca) }); err != nil {
		return err
	}
	if err := supervisor.Run(ctx, "kubernetes-pki", s.runKubernetesPKI); err != nil {
		return err
	}
	if err := supervisor.Run(ctx, "recovery", s.runRecovery); err != nil {
		return err
	}
	if err := supervisor.Run(ctx, "podranges", s.runPodRanges); err != nil {
		return err
	}
	if err := supervisor.Run(ctx, "certificate", func(ctx context.Context) error { return s.renewCertificate(ctx, ca, serving, addr.Addr()) }); err != nil {
		return err
	}

	srv := grpc.NewServer(append([]grpc.ServerOption{
		grpc.Creds(creds),
		// No request needs more; the stored parts of requests have
		// tighter limits of their own (validate.go).
		grpc.MaxRecvMsgSize(MaxRequestSize),
		// Clients ping idle connections to notice a hung curator (see
		// curator/client); allow that, and refuse anything more eager.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: MinClientPingInterval, PermitWithoutStream: true}),
	}, s.serverOptions()...)...)
	rpc := &rpcServer{s: s, ca: ca, self: &cpb.CuratorEndpoint{NodeId: s.nodeID, Address: addr.Addr().String(), Port: uint32(addr.Port())}}
	cpb.RegisterCuratorServiceServer(srv, rpc)
	cpb.RegisterManagementServiceServer(srv, rpc)
	cpb.RegisterAAAServiceServer(srv, rpc)
	// Health, reflection and metrics (observability.go).
	hs := registerStandard(srv)
	if err := supervisor.Run(ctx, "health", s.trackHealth(hs)); err != nil {
		return err
	}

	s.status.Set(&Status{NodeID: s.nodeID, Address: addr, CACertificate: ca.Certificate().Raw})
	// Withdrawn as soon as this run stops serving, however it ends: a
	// stopped curator must not look like one that serves.
	defer s.status.Set(nil)
	supervisor.Logger(ctx).Info("serving", zap.Stringer("address", addr), zap.String("node", s.nodeID))
	supervisor.Signal(ctx, supervisor.SignalHealthy)

	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	select {
	case <-ctx.Done():
		// Health checkers see the stop before the connections go.
		hs.Shutdown()
		// Streams (Watch) never end by themselves: stop, do not drain;
		// and close the connections Stop would wait for (listener.go).
		lis.closeAll()
		srv.Stop()
		<-served
		return ctx.Err()
	case err := <-served:
		return fmt.Errorf("serving gRPC: %w", err)
	}
}

// rpcServer implements the three services. Its methods live in one file per
// service (rpc_curator.go, rpc_management.go, rpc_aaa.go).
type rpcServer struct {
	cpb.UnimplementedCuratorServiceServer
	cpb.UnimplementedManagementServiceServer
	cpb.UnimplementedAAAServiceServer

	s    *Service
	ca   *identity.CA
	self *cpb.CuratorEndpoint
}
