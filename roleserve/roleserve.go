package roleserve

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"go.uber.org/zap"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/localstorage"
	"github.com/polis-os/polis/supervisor"
)

// Config is what the role server needs besides its values: facts about the
// node that do not change while it runs, and where it keeps what it must
// find again after a reboot.
type Config struct {
	// Node is what the node reports about itself besides its curator.
	Node NodeInfo
	// ControlPlane configures the controlplane worker. Its Address
	// defaults to Node.ExternalAddress.
	ControlPlane ControlPlaneConfig
	// Kubernetes configures the kubernetes worker; its zero value runs no
	// Kubernetes (the status says why).
	Kubernetes KubernetesConfig
	// RolesFile keeps the node's last known roles (localstorage's
	// Data.Roles).
	RolesFile localstorage.File
	// DirectoryFile keeps the cluster directory (localstorage's
	// ESP.ClusterDirectory).
	DirectoryFile localstorage.File
	// WireGuardKeyFile keeps the node's WireGuard private key, made on
	// first use (clusternet.LoadOrCreateKey): on the data disk, in a
	// private directory, since peers know the node by its public half.
	WireGuardKeyFile string
	// Dial is the test seam of the membership worker (see DialFunc); nil
	// means client.New, which production always uses.
	Dial DialFunc
}

// NodeInfo is the part of a node's status that is fixed for the life of the
// node agent.
type NodeInfo struct {
	// ExternalAddress is where other nodes and operators reach this node.
	ExternalAddress netip.Addr
	// Version is the node agent's version.
	Version string
	// BootID is the Linux boot ID of the current boot.
	BootID string
	// DataSealing is how the node keeps its data at rest.
	DataSealing cpb.DataSealing
}

func (c *Config) validate() error {
	var errs []error
	if !c.Node.ExternalAddress.IsValid() {
		errs = append(errs, errors.New("Node.ExternalAddress is required"))
	}
	if c.ControlPlane.NodeKey == nil {
		errs = append(errs, errors.New("ControlPlane.NodeKey is required"))
	}
	if c.ControlPlane.EtcdDir == "" {
		errs = append(errs, errors.New("ControlPlane.EtcdDir is required"))
	}
	if c.RolesFile.Path == "" {
		errs = append(errs, errors.New("RolesFile is required"))
	}
	if c.DirectoryFile.Path == "" {
		errs = append(errs, errors.New("DirectoryFile is required"))
	}
	if c.WireGuardKeyFile == "" {
		errs = append(errs, errors.New("WireGuardKeyFile is required"))
	}
	if err := c.Kubernetes.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("role server config: %w", err)
	}
	if !c.ControlPlane.Address.IsValid() {
		c.ControlPlane.Address = c.Node.ExternalAddress
	}
	return nil
}

// RoleServer runs the role server's workers over its values.
type RoleServer struct {
	graph   *Graph
	workers []worker
}

// worker is what the role server runs: a worker's handle on the Graph,
// whose name its runnable runs under, and its loop.
type worker interface {
	Name() string
	run(ctx context.Context) error
}

// externalValues are written outside the role server, by whom: credentials
// by enrolment, dataClusterBound by the data disk's binding (node/).
var externalValues = map[string]string{"credentials": "enrolment (node/)", "dataClusterBound": "databinding (node/)"}

// New builds every worker over v. Building them declares the whole graph
// (see Graph), so Graph is complete, and checked, as soon as New returns.
func New(cfg Config, v *Values) (*RoleServer, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	g := &Graph{}
	s := &RoleServer{graph: g, workers: []worker{
		newWorkerControlPlane(g, v, cfg.ControlPlane),
		newWorkerMembership(g, v, cfg.Dial),
		newWorkerRoleFetch(g, v, cfg.RolesFile),
		newWorkerStatusPush(g, v, cfg.Node, cfg.ControlPlane.consensusPort()),
		newWorkerHeartbeat(g, v),
		newWorkerClusterDirectory(g, v, cfg.DirectoryFile),
		newWorkerKubernetes(g, v, cfg.Kubernetes, cfg.Node.ExternalAddress),
		newWorkerKubernetesWorker(g, v, cfg.Kubernetes, cfg.Node.ExternalAddress, cfg.WireGuardKeyFile),
		newWorkerClusterNet(g, v, cfg.WireGuardKeyFile),
	}}
	// The graph is fixed once the workers are built: a worker that reads
	// what nobody writes would wait forever, so refuse to start at all.
	if err := g.Check(slices.Collect(maps.Keys(externalValues))...); err != nil {
		return nil, err
	}
	return s, nil
}

// Graph is which worker reads and writes which value.
func (s *RoleServer) Graph() *Graph { return s.graph }

// Run logs the graph (checked by New) and runs every worker as a supervised
// child, until ctx is cancelled.
func (s *RoleServer) Run(ctx context.Context) error {
	log := supervisor.Logger(ctx)
	for line := range strings.Lines(s.graph.String()) {
		log.Info("worker", zap.String("values", strings.TrimSuffix(line, "\n")))
	}
	for _, w := range s.workers {
		if err := supervisor.Run(ctx, w.Name(), w.run); err != nil {
			return fmt.Errorf("starting worker %s: %w", w.Name(), err)
		}
	}
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	<-ctx.Done()
	return ctx.Err()
}
