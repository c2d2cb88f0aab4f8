package curator

import (
	"context"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/internal/rpcauth"
	"github.com/polis-os/polis/supervisor"
)

// What the curator shows of itself to standard tools, beside its API:
//
//   - grpc.health.v1.Health: the overall status ("") is SERVING while the
//     curator serves at all (every curator answers GetLeader and
//     GetCACertificate); each of the three services is SERVING only while
//     this curator leads, since followers refuse their other calls. A load
//     balancer or grpc_health_probe aimed at "polis.curator.v1.ManagementService"
//     thus finds the leader. Stopping the curator sets everything
//     NOT_SERVING before connections close.
//   - server reflection, so that grpcurl lists and calls the services
//     without the .proto files.
//   - Prometheus metrics of every call, per service and method (counts by
//     status code, and handling-time histograms), from the grpc
//     ecosystem's middleware; RegisterMetrics exposes them, and
//     HeartbeatAges this curator's view of each node's last heartbeat.
//
// Health and reflection need no caller check: they tell which services
// exist and where the leader is, which GetLeader tells anyone anyway.

// rpcMetrics counts the calls of every curator of the process: a metric
// has one name per process, so in-process clusters (tests) share it, with
// the method as a label. The embedded etcd registers the same middleware's
// grpc_server_* names for its own server, hence the prefix.
var rpcMetrics = grpcprom.NewServerMetrics(
	grpcprom.WithServerCounterOptions(grpcprom.WithNamespace("polis_curator")),
	grpcprom.WithServerHandlingTimeHistogram(grpcprom.WithHistogramNamespace("polis_curator")),
)

// RegisterMetrics registers the curators' RPC metrics with reg:
// polis_curator_grpc_server_started_total, _handled_total,
// _msg_received_total, _msg_sent_total and _handling_seconds, labelled by
// service and method.
func RegisterMetrics(reg prometheus.Registerer) error {
	return reg.Register(rpcMetrics)
}

// HeartbeatAges returns how long ago each node last heartbeated, as this
// curator knows: from the heartbeats it received and those every curator
// recorded (health.go). Every curator answers alike, leader or not.
func (s *Service) HeartbeatAges() map[string]time.Duration {
	return s.heartbeats.ages(s.cfg.Now())
}

// serverOptions are the interceptors of the curator's server: metrics
// around everything, then the authorization check (authz.go) for all but
// the open services.
func (s *Service) serverOptions() []grpc.ServerOption {
	authz := s.authzServer()
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(rpcMetrics.UnaryServerInterceptor(), authz.UnaryInterceptor()),
		grpc.ChainStreamInterceptor(rpcMetrics.StreamServerInterceptor(), authz.StreamInterceptor()),
	}
}

// leaderServices are SERVING in the health service only on the leader.
var leaderServices = []string{
	cpb.CuratorService_ServiceDesc.ServiceName,
	cpb.ManagementService_ServiceDesc.ServiceName,
	cpb.AAAService_ServiceDesc.ServiceName,
}

// registerStandard adds health and reflection to srv and returns the
// health server, every service NOT_SERVING until trackHealth runs.
func registerStandard(srv *grpc.Server) *health.Server {
	hs := rpcauth.RegisterStandard(srv, healthpb.HealthCheckResponse_NOT_SERVING, leaderServices...)
	rpcMetrics.InitializeMetrics(srv)
	return hs
}

// trackHealth keeps hs in step with the leadership: the overall status
// SERVING from now on, the services SERVING while this curator leads.
//
//	reads: leader
func (s *Service) trackHealth(hs *health.Server) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		w := s.leader.Watch()
		defer w.Close()
		for {
			l, err := w.Get(ctx)
			if err != nil {
				return err
			}
			st := healthpb.HealthCheckResponse_NOT_SERVING
			if l != nil {
				st = healthpb.HealthCheckResponse_SERVING
			}
			for _, name := range leaderServices {
				hs.SetServingStatus(name, st)
			}
		}
	}
}
