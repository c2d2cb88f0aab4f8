package controller

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/polis-os/polis/consensus"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/kube/controlplane"
	"github.com/polis-os/polis/kube/etcdproxy"
	"github.com/polis-os/polis/kube/pki"
	"github.com/polis-os/polis/supervisor"
)

// The control plane's place in the cluster's etcd, and the name its PKI
// is created with.
const (
	// KubernetesUser is the consensus namespace the apiserver is confined
	// to: its keys are /namespace/kubernetes/registry/...
	KubernetesUser = "kubernetes"
	// PKIUser is the namespace that keeps the Kubernetes PKI
	// (pki.StoreKey): the curator's, which the apiserver cannot reach.
	PKIUser = "curator"
	// DefaultClusterName names the cluster in its Kubernetes CA if the
	// curator has not created it first; the controller-manager's
	// --cluster-name is "polis" too.
	DefaultClusterName = "polis"
	// DefaultStopGrace is how long a component may take to stop before it
	// is killed. With etcd there, the apiserver stops in about a second;
	// when the whole node stops, etcd stops alongside and the apiserver's
	// clean shutdown waits on it until killed. Killing it loses nothing:
	// its state is in etcd.
	DefaultStopGrace = 5 * time.Second
	// PKITimeout bounds reading (or creating) the PKI in etcd.
	PKITimeout = 30 * time.Second
	// MaxSocketPath is the longest path of a unix socket (sun_path less
	// its terminating NUL).
	MaxSocketPath = 107
)

// Config is what Start needs.
type Config struct {
	// Bundle is the absolute path of polis-kube (kube/bundle).
	Bundle string
	// Dir keeps the component files (under controlplane/) and the confined
	// etcd socket: absolute, created 0700, private to the node agent.
	Dir string
	// Address is the node's address; the apiserver serves there.
	Address netip.Addr
	// Port is the apiserver's port; controlplane.DefaultPort if 0.
	Port uint16
	// StopGrace: DefaultStopGrace if 0.
	StopGrace time.Duration
	// PodRanges is where the curator keeps the nodes' pod ranges, which
	// the Nodes' spec.podCIDR follow (podcidr.go); zero: no podCIDR is
	// set.
	PodRanges PodRangeSource
	// Nodes is where the curator keeps its node records, so that a
	// Node whose Polis node was deleted while no controller watched is
	// deleted when the Nodes are next read (podcidr.go); zero: such a
	// Node is deleted only if its podCIDR is set.
	Nodes NodeRecordSource
	// Cgroup is where each component gets a cgroup v2 directory of its
	// own (controlplane.Config.Cgroup); empty: none.
	Cgroup string
}

// PodRangeSource is the curator's record of the nodes' pod ranges in its
// etcd namespace (PKIUser): one key per range under Prefix, the node ID
// its value. The curator says how (curator.PodRangesPrefix,
// curator.ParsePodRangeKey); this package, below the curator, is told.
type PodRangeSource struct {
	Prefix string
	// Range is the range a key under Prefix stands for.
	Range func(key []byte) (netip.Prefix, bool)
}

// NodeRecordSource is the curator's record of the Polis nodes in its etcd
// namespace (PKIUser): one key per node, Prefix followed by the node's ID.
// Only which keys exist is read, never their values. The curator says
// where; this package, below it, is told (as for PodRangeSource).
type NodeRecordSource struct {
	Prefix string
}

// Validate says what is wrong with c, if anything.
func (c Config) Validate() error {
	if !filepath.IsAbs(c.Bundle) {
		return fmt.Errorf("controller: bundle %q is not an absolute path", c.Bundle)
	}
	if !filepath.IsAbs(c.Dir) {
		return fmt.Errorf("controller: directory %q is not an absolute path", c.Dir)
	}
	if c.Cgroup != "" && !filepath.IsAbs(c.Cgroup) {
		return fmt.Errorf("controller: cgroup %q is not an absolute path", c.Cgroup)
	}
	if sock := c.EtcdSocket(); len(sock) > MaxSocketPath {
		return fmt.Errorf("controller: directory %q: the etcd socket %s would be longer than %d bytes, the limit for unix sockets", c.Dir, sock, MaxSocketPath)
	}
	return nil
}

// EtcdSocket is where the confined etcd proxy serves.
func (c Config) EtcdSocket() string { return filepath.Join(c.Dir, "etcd.sock") }

// APIServerPort is the port the apiserver serves on.
func (c Config) APIServerPort() uint16 {
	if c.Port == 0 {
		return controlplane.DefaultPort
	}
	return c.Port
}

// Start reads (or creates) the cluster's Kubernetes PKI through the
// consensus member st, issues this node's component files, and starts the
// confined etcd proxy ("etcdproxy") and the runner ("controlplane") as
// children of the runnable whose ctx it is given. It returns the runner,
// whose Status the caller follows. Everything stops when that runnable's
// run ends; see the package doc for the order.
func Start(ctx context.Context, cfg Config, st *consensus.Status) (*controlplane.Runner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.StopGrace == 0 {
		cfg.StopGrace = DefaultStopGrace
	}
	log := supervisor.Logger(ctx)
	cluster, err := clusterPKI(ctx, st)
	if err != nil {
		return nil, err
	}
	port := cfg.APIServerPort()
	server := "https://" + netip.AddrPortFrom(cfg.Address, port).String()
	files, err := cluster.ControlPlaneFiles([]netip.Addr{cfg.Address}, ServiceIP(controlplane.DefaultServiceCIDR), server, time.Now())
	if err != nil {
		return nil, fmt.Errorf("issuing the control plane's certificates: %w", err)
	}
	// The directory holds the socket through which etcd is reached
	// unauthenticated: private to the node agent.
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", cfg.Dir, err)
	}
	if err := os.Chmod(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("making %s private: %w", cfg.Dir, err)
	}
	conn, err := st.ConnectionFor(KubernetesUser)
	if err != nil {
		return nil, err
	}
	// The proxy, a child, uses the connection until it has stopped.
	supervisor.Cleanup(ctx, func() { conn.Close() })
	proxy, err := etcdproxy.New(etcdproxy.Config{Client: conn.Client, Prefix: conn.Prefix, Socket: cfg.EtcdSocket()})
	if err != nil {
		return nil, err
	}
	runner, err := controlplane.New(controlplane.Config{
		Bundle:       cfg.Bundle,
		Dir:          filepath.Join(cfg.Dir, "controlplane"),
		Files:        files,
		Address:      cfg.Address,
		Port:         int(port),
		EtcdEndpoint: proxy.Endpoint(),
		StopGrace:    cfg.StopGrace,
		Cgroup:       cfg.Cgroup,
	})
	if err != nil {
		return nil, err
	}
	if err := supervisor.Run(ctx, "etcdproxy", proxyOutliving(proxy, runner, cfg.StopGrace+proxyStopMargin)); err != nil {
		return nil, err
	}
	if err := supervisor.Run(ctx, "controlplane", runner.Run); err != nil {
		return nil, err
	}
	if cfg.PodRanges.Prefix != "" {
		curatorNS, err := st.ClientFor(PKIUser)
		if err != nil {
			return nil, err
		}
		supervisor.Cleanup(ctx, func() { curatorNS.Close() })
		// A fresh certificate for every run of it: one that fails (or
		// outlives half the certificate's life) is started again by its
		// supervisor through this closure.
		if err := supervisor.Run(ctx, "podcidr", func(ctx context.Context) error {
			pc, err := newPodCIDRs(cluster, server, curatorNS, cfg.PodRanges, cfg.Nodes, runner.Status())
			if err != nil {
				return err
			}
			return pc.run(ctx)
		}); err != nil {
			return nil, err
		}
	}
	log.Info("Kubernetes control plane started", zap.String("server", server), zap.String("etcd_prefix", conn.Prefix), zap.String("dir", cfg.Dir))
	return runner, nil
}

// clusterPKI returns the cluster's Kubernetes PKI from the curator's
// namespace, creating it if this is the first controller node to need it
// (pki.Ensure: one transaction, so racing nodes end up with the same).
func clusterPKI(ctx context.Context, st *consensus.Status) (*pki.Cluster, error) {
	cli, err := st.ClientFor(PKIUser)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	return ensurePKI(ctx, cli)
}

func ensurePKI(ctx context.Context, cli *clientv3.Client) (*pki.Cluster, error) {
	ctx, cancel := context.WithTimeout(ctx, PKITimeout)
	defer cancel()
	cluster, created, err := pki.Ensure(ctx, cli, DefaultClusterName, time.Now())
	if err != nil {
		return nil, err
	}
	if created {
		supervisor.Logger(ctx).Info("created the cluster's Kubernetes PKI")
	}
	return cluster, nil
}

// ServiceIP is the kubernetes service's address: the first of the range.
func ServiceIP(cidr netip.Prefix) netip.Addr { return cidr.Masked().Addr().Next() }

// proxyStopMargin is how much longer than the components' stop grace the
// proxy keeps serving, once stopped, for components that have not stopped
// yet.
const proxyStopMargin = 5 * time.Second

// proxyOutliving runs the proxy so that it outlives the components: when
// the run is cancelled, every runnable of it is cancelled at once, and an
// apiserver told to stop while its etcd is already gone hangs in its
// shutdown until it is killed. The proxy therefore stops serving only once
// no component runs any more (or after bound).
func proxyOutliving(proxy *etcdproxy.Proxy, runner *controlplane.Runner, bound time.Duration) supervisor.Runnable {
	return func(ctx context.Context) error {
		// Its values (logger, place in the tree) without its cancellation.
		serveCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
		defer stop()
		served := make(chan error, 1)
		go func() { served <- proxy.Run(serveCtx) }()
		select {
		case err := <-served:
			if err == nil {
				err = errors.New("the etcd proxy stopped")
			}
			return err
		case <-ctx.Done():
		}
		wait, cancel := context.WithTimeout(serveCtx, bound)
		_, _ = event.Get(wait, runner.Status(), event.Filter(noComponentRuns))
		cancel()
		stop()
		<-served
		return ctx.Err()
	}
}

// noComponentRuns holds once every component's process has ended.
func noComponentRuns(s *controlplane.Status) bool {
	for _, c := range s.Components {
		if c.Running {
			return false
		}
	}
	return true
}
