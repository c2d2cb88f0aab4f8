package etcdproxy

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"regexp"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/namespace"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/polis-os/polis/supervisor"
)

// PrefixRegexp is what Config.Prefix must match: an absolute path of
// lower-case segments ending in "/", so that no two prefixes of different
// names overlap ("/kubernetes/" does not contain "/kubernetes2/").
var PrefixRegexp = regexp.MustCompile(`^/([a-z0-9][a-z0-9._-]*/)+$`)

// maxRequestBytes bounds one request from the client. etcd itself refuses
// requests over its --max-request-bytes (1.5 MiB by default); this leaves
// room above that so etcd, not the proxy, gives the error.
const maxRequestBytes = 8 << 20

// Config says what to confine and where to serve it.
type Config struct {
	// Client reaches the cluster's etcd unconfined; the proxy does the
	// confining. It must have a live connection (clientv3.New), because
	// watches and leases are forwarded as raw gRPC streams over it. The
	// caller keeps ownership and closes it after Run returned.
	Client *clientv3.Client
	// Prefix is the key space served, e.g. "/kubernetes/"; see PrefixRegexp.
	Prefix string
	// Socket is the path of the unix socket to serve on. A stale socket at
	// that path is replaced. Its directory should be private (see the
	// package doc).
	Socket string
}

// Proxy serves one confined key space. Create it with New and run it with
// Run.
type Proxy struct {
	cfg    Config
	leases *leaseSet
}

// New validates cfg and returns a proxy ready to Run.
func New(cfg Config) (*Proxy, error) {
	if cfg.Client == nil {
		return nil, errors.New("etcdproxy: Config.Client is nil")
	}
	if cfg.Client.ActiveConnection() == nil {
		return nil, errors.New("etcdproxy: Config.Client has no gRPC connection (a namespaced or context-only client?)")
	}
	if !PrefixRegexp.MatchString(cfg.Prefix) {
		return nil, fmt.Errorf("etcdproxy: prefix %q does not match %s", cfg.Prefix, PrefixRegexp)
	}
	if cfg.Socket == "" {
		return nil, errors.New("etcdproxy: Config.Socket is empty")
	}
	return &Proxy{cfg: cfg, leases: newLeaseSet()}, nil
}

// Endpoint is the etcd endpoint clients dial for this proxy, as
// kube-apiserver's --etcd-servers takes it.
func (p *Proxy) Endpoint() string { return "unix://" + p.cfg.Socket }

// Run serves on the socket until ctx ends, then stops the server (ending
// open streams) and removes the socket. It signals healthy once the socket
// accepts connections. It is a supervisor.Runnable.
func (p *Proxy) Run(ctx context.Context) error {
	if err := os.Remove(p.cfg.Socket); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing stale socket: %w", err)
	}
	lis, err := net.Listen("unix", p.cfg.Socket)
	if err != nil {
		return fmt.Errorf("listening: %w", err)
	}
	defer os.Remove(p.cfg.Socket)
	if err := os.Chmod(p.cfg.Socket, 0o600); err != nil {
		lis.Close()
		return fmt.Errorf("making the socket private: %w", err)
	}

	srv := p.server()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	supervisor.Logger(ctx).Info("serving confined etcd", zap.String("socket", p.cfg.Socket), zap.String("prefix", p.cfg.Prefix))
	supervisor.Signal(ctx, supervisor.SignalHealthy)

	select {
	case <-ctx.Done():
		srv.Stop()
		<-served
		return ctx.Err()
	case err := <-served:
		return fmt.Errorf("serving: %w", err)
	}
}

// server builds the gRPC server with every confined service.
func (p *Proxy) server() *grpc.Server {
	cli, prefix := p.cfg.Client, p.cfg.Prefix
	conn := cli.ActiveConnection()
	// kube-apiserver's etcd client pings every 30 s, with or without a
	// call in flight; gRPC's default policy (at most one ping in 5
	// minutes) answered that with GOAWAY too_many_pings, dropping the
	// connection and failing the calls on it (seen as timeouts and a
	// control plane that took many minutes to be ready in VMs). Allow
	// what etcd itself allows.
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(maxRequestBytes),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}))
	pb.RegisterKVServer(srv, &kvServer{kv: namespace.NewKV(cli.KV, prefix), leases: p.leases})
	pb.RegisterWatchServer(srv, &watchServer{upstream: pb.NewWatchClient(conn), prefix: prefix})
	pb.RegisterLeaseServer(srv, &leaseServer{upstream: pb.NewLeaseClient(conn), prefix: prefix, leases: p.leases})
	pb.RegisterMaintenanceServer(srv, &maintenanceServer{upstream: pb.NewMaintenanceClient(conn)})
	return srv
}
