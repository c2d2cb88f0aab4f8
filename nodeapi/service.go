package nodeapi

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	nodev1 "github.com/polis-os/polis/api/node/v1"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/internal/rpcauth"
	"github.com/polis-os/polis/logring"
	"github.com/polis-os/polis/roleserve"
	"github.com/polis-os/polis/supervisor"
)

// DefaultPort is the node API's port, next to the curator's (7835).
const DefaultPort = 7836

// stopGrace is how long a stopping server lets calls in flight finish (a
// Reboot's answer, a Logs batch) before it cuts the rest (follow streams
// never finish on their own).
const stopGrace = time.Second

// Config is what the node API serves and where.
type Config struct {
	// Address is the node's address; the API listens on it. Required.
	Address netip.Addr
	// Port defaults to DefaultPort; tests may give any free port.
	Port uint16
	// MetricsPort is where /metrics is served (see metrics.go); it
	// defaults to DefaultMetricsPort.
	MetricsPort uint16
	// LocalControlPlane is the node's control plane, for the metrics of
	// its curator. Optional.
	LocalControlPlane event.ValueWatch[*roleserve.LocalControlPlane]
	// Credentials are the node's; the API serves once they are set,
	// presenting the node certificate until APICertificate has a node API
	// certificate for the same key. Required.
	Credentials event.ValueWatch[*roleserve.Credentials]
	// APICertificate is the node's API certificate (identity.CA.IssueNodeAPI)
	// for the key of Credentials: what the gRPC API and /metrics serve
	// with as soon as it is set, and which stock TLS clients verify with
	// the cluster CA. Without it (or until it is set) the node certificate
	// serves, which only clients that skip host verification accept.
	APICertificate event.ValueWatch[*x509.Certificate]
	// OwnerKey tells the cluster's current owner key (CuratorOwnerKey asks
	// the curator): the node API and /metrics answer an owner certificate
	// only for it, so that rotating the owner key revokes the old key's
	// certificates on nodes as on the curators (see ownerStands). Without
	// it any owner certificate from the cluster CA is accepted; only tests
	// leave it out.
	OwnerKey OwnerKeyFunc
	// Logs holds the node's log lines; without it Logs answers
	// FAILED_PRECONDITION.
	Logs *logring.Ring
	// RoleServer is what GetRoleServerGraph shows; without it that call
	// answers FAILED_PRECONDITION.
	RoleServer *RoleServer
	// Power reboots or powers off the node; without it Reboot and PowerOff
	// answer UNIMPLEMENTED.
	Power PowerFunc
	// Cgroups is the cgroup v2 tree the node's programs run in, where the
	// agent is PID 1 and laid it out (node/pid1): /metrics then reports
	// the CPU and memory of its top two levels (cgroupmetrics.go). Empty:
	// it does not (a development node shares its host's tree).
	Cgroups string
}

// OwnerKeyFunc returns the cluster's current owner key.
type OwnerKeyFunc func(ctx context.Context) (ed25519.PublicKey, error)

// PowerAction is what Reboot and PowerOff ask for.
type PowerAction int

// The power actions.
const (
	// Reboot: stop everything and start again.
	Reboot PowerAction = iota + 1
	// PowerOff: stop everything for good.
	PowerOff
)

// String names the action for logs.
func (a PowerAction) String() string {
	switch a {
	case Reboot:
		return "reboot"
	case PowerOff:
		return "power off"
	}
	return fmt.Sprintf("PowerAction(%d)", int(a))
}

// PowerFunc starts a reboot or power off and returns at once; the node
// goes down afterwards (its supervisor tree is cancelled), which lets the
// node API answer the call first. In process mode it stops the agent and
// restarts or exits the process; in a VM, PID 1 reboots or powers off the
// machine.
type PowerFunc func(PowerAction)

// Service is the node API. Make it with New and run Run under the node's
// supervisor.
type Service struct {
	cfg Config
	// ownerKey is the owner key OwnerKey last returned.
	ownerKey atomic.Pointer[ed25519.PublicKey]
}

// New checks cfg.
func New(cfg Config) (*Service, error) {
	if !cfg.Address.IsValid() {
		return nil, errors.New("node API config: Address is required")
	}
	if cfg.Credentials == nil {
		return nil, errors.New("node API config: Credentials is required")
	}
	if cfg.Port == 0 {
		cfg.Port = DefaultPort
	}
	if cfg.MetricsPort == 0 {
		cfg.MetricsPort = DefaultMetricsPort
	}
	return &Service{cfg: cfg}, nil
}

// AddrPort is where the API listens.
func (s *Service) AddrPort() netip.AddrPort { return netip.AddrPortFrom(s.cfg.Address, s.cfg.Port) }

// Run serves the API once the node has credentials, with its node API
// certificate when it has one (followAPICertificate), else its node
// certificate. When the node certificate is renewed Run returns an error
// saying so, and the supervisor restarts it with the new credentials.
//
//	reads: credentials (and the node API certificate, in followAPICertificate)
func (s *Service) Run(ctx context.Context) error {
	tree, ok := supervisor.TreeOf(ctx)
	if !ok {
		return errors.New("the node API runs only under a supervisor: it serves its tree")
	}
	w := s.cfg.Credentials.Watch()
	defer w.Close()
	creds, err := w.Get(ctx, event.Filter(func(c *roleserve.Credentials) bool { return c != nil }))
	if err != nil {
		return err
	}
	v, err := identity.NewVerifier(creds.CACertificate)
	if err != nil {
		return err
	}
	sc, err := identity.NewNodeServingCertificate(v, creds.TLSCertificate())
	if err != nil {
		return err
	}
	if s.cfg.APICertificate != nil {
		if err := supervisor.Run(ctx, "certificate", s.followAPICertificate(creds, sc)); err != nil {
			return err
		}
	}
	if err := supervisor.Run(ctx, "grpc", s.serve(creds, sc, tree)); err != nil {
		return err
	}
	if err := supervisor.Run(ctx, "metrics", s.serveMetrics(creds, sc, tree)); err != nil {
		return err
	}
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	next, err := w.Get(ctx, event.Filter(func(c *roleserve.Credentials) bool { return c != nil && !c.Certificate.Equal(creds.Certificate) }))
	if err != nil {
		return err
	}
	return fmt.Errorf("the node certificate changed (serial %s, until %s): serving the new one", next.Certificate.SerialNumber, next.Certificate.NotAfter.UTC().Format(time.RFC3339))
}

// followAPICertificate returns the runnable that makes sc present every
// node API certificate APICertificate gets, with the key of creds, from
// the next handshake on. A certificate sc refuses (another key, expired)
// is logged and skipped: sc keeps what it presents.
//
//	reads:  the node API certificate
//	writes: sc
func (s *Service) followAPICertificate(creds *roleserve.Credentials, sc *identity.ServingCertificate) supervisor.Runnable {
	return func(ctx context.Context) error {
		log := supervisor.Logger(ctx)
		w := s.cfg.APICertificate.Watch()
		defer w.Close()
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		for {
			cert, err := w.Get(ctx, event.Filter(func(c *x509.Certificate) bool { return c != nil }))
			if err != nil {
				return err
			}
			tc := tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: creds.Key, Leaf: cert}
			if err := sc.Replace(tc); err != nil {
				log.Warn("not serving with the node API certificate", zap.Error(err))
				continue
			}
			log.Info("serving with the node API certificate", zap.String("serial", cert.SerialNumber.String()), zap.Time("expires", cert.NotAfter), zap.Any("addresses", cert.IPAddresses))
		}
	}
}

// serve returns the runnable of one gRPC server presenting sc and
// authorising callers against the CA of creds.
func (s *Service) serve(creds *roleserve.Credentials, sc *identity.ServingCertificate, tree event.ValueWatch[supervisor.TreeState]) supervisor.Runnable {
	return func(ctx context.Context) error {
		log := supervisor.Logger(ctx)
		v, err := identity.NewVerifier(creds.CACertificate)
		if err != nil {
			return err
		}
		tc, err := identity.ServerCredentials(v, sc)
		if err != nil {
			return err
		}
		lis, err := net.Listen("tcp", s.AddrPort().String())
		if err != nil {
			return fmt.Errorf("node API: %w", err)
		}
		authz := s.authzServer(log)
		srv := grpc.NewServer(grpc.Creds(tc),
			grpc.ChainUnaryInterceptor(authz.UnaryInterceptor()),
			grpc.ChainStreamInterceptor(authz.StreamInterceptor()))
		nodev1.RegisterNodeServiceServer(srv, &server{cfg: &s.cfg, tree: tree, log: log})
		hs := rpcauth.RegisterStandard(srv, healthpb.HealthCheckResponse_SERVING, nodev1.NodeService_ServiceDesc.ServiceName)

		served := make(chan error, 1)
		go func() { served <- srv.Serve(lis) }()
		log.Info("serving the node API", zap.Stringer("address", lis.Addr()))
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		select {
		case err := <-served:
			return fmt.Errorf("node API: serving: %w", err)
		case <-ctx.Done():
		}
		// Say NOT_SERVING first, so that health checkers see the stop
		// before connections go.
		hs.Shutdown()
		stopWithin(srv, stopGrace)
		<-served
		return ctx.Err()
	}
}

// stopWithin stops srv gracefully, cutting what is still running after
// grace.
func stopWithin(srv *grpc.Server, grace time.Duration) {
	done := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(done)
	}()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		srv.Stop()
		<-done
	}
}
