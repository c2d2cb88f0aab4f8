package nodeapi

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/polis-os/polis/curator"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/event/memory"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/roleserve"
	"github.com/polis-os/polis/supervisor"
)

// DefaultMetricsPort is where a node serves Prometheus metrics (/metrics).
const DefaultMetricsPort = 7837

// The metrics a node serves on /metrics, in Prometheus' text format:
//
//   - the process-wide ones: the embedded etcd's own (etcd_*, registered by
//     etcd with Prometheus' default registry), the Go runtime's and the
//     process's (go_*, process_*), the event values' (polis_event_*: sets,
//     deliveries and watchers per value), the curators' RPCs
//     (polis_curator_grpc_server_*, per service and method);
//   - the node's own: its supervisor tree (polis_supervisor_runnables by
//     state, polis_supervisor_runnable_restarts per runnable) and, while
//     this node runs a curator, every node's heartbeat age as that curator
//     knows it (polis_curator_node_heartbeat_age_seconds; every curator
//     knows every heartbeat, see the curator's package documentation);
//   - on a node image (Config.Cgroups), what each of the node's programs
//     costs: the CPU and memory of the cgroup tree's top two levels
//     (polis_cgroup_cpu_seconds_total, polis_cgroup_memory_bytes, by
//     cgroup: polis/agent, kube-controlplane/apiserver, kubernetes/kubelet,
//     ...; see cgroupmetrics.go).
//
// Profiles. Beside /metrics, /debug/pprof/ serves the agent's Go runtime
// profiles (CPU, heap, goroutines, ...) to the same callers, for `go tool
// pprof`: what a node's agent spends its CPU on is otherwise hard to see
// on a VM or a machine without perf, and under TCG an idle agent's share
// was large enough to ask (profiles.go).
//
// Where. On a loopback address (development mode, where every node of a
// cluster is a process on one machine) /metrics is plain HTTP: only this
// machine reaches it. On any other address it is HTTPS with the node API's
// mTLS: the node presents its certificate, and only the owner is answered,
// with a certificate for the current owner key (a Prometheus scraper is
// given one). Nodes are not: a node's certificate outlives its
// decommissioning.

// processMetrics registers, once per process, the collectors that exist
// once per process.
var processMetrics = sync.OnceValue(func() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	// Both only fail on a second registration, which the Once rules out.
	_ = memory.RegisterMetrics(reg)
	_ = curator.RegisterMetrics(reg)
	return reg
})

// gatherer is everything /metrics shows for one node.
func (s *Service) gatherer(tree event.ValueWatch[supervisor.TreeState]) prometheus.Gatherer {
	reg := prometheus.NewRegistry()
	reg.MustRegister(&nodeCollector{tree: tree, controlPlane: s.cfg.LocalControlPlane})
	if s.cfg.Cgroups != "" {
		reg.MustRegister(&cgroupCollector{root: s.cfg.Cgroups})
	}
	return prometheus.Gatherers{prometheus.DefaultGatherer, processMetrics(), reg}
}

// nodeCollector reads the node's state at scrape time.
type nodeCollector struct {
	tree         event.ValueWatch[supervisor.TreeState]
	controlPlane event.ValueWatch[*roleserve.LocalControlPlane]
}

var (
	runnablesDesc = prometheus.NewDesc("polis_supervisor_runnables",
		"Runnables of the node's supervisor tree, by state.", []string{"state"}, nil)
	restartsDesc = prometheus.NewDesc("polis_supervisor_runnable_restarts",
		"Restarts of each runnable since its parent last started it.", []string{"runnable"}, nil)
	heartbeatDesc = prometheus.NewDesc("polis_curator_node_heartbeat_age_seconds",
		"Seconds since each node's last heartbeat, as this node's curator knows it.", []string{"node"}, nil)
)

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- runnablesDesc
	ch <- restartsDesc
	ch <- heartbeatDesc
}

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	if t, ok := current(c.tree); ok {
		states := map[supervisor.State]int{}
		for n := range t.All() {
			states[n.State]++
			ch <- prometheus.MustNewConstMetric(restartsDesc, prometheus.GaugeValue, float64(n.Restarts), n.Name)
		}
		for st := supervisor.StateNew; st <= supervisor.StateStopped; st++ {
			ch <- prometheus.MustNewConstMetric(runnablesDesc, prometheus.GaugeValue, float64(states[st]), st.String())
		}
	}
	if c.controlPlane == nil {
		return
	}
	lcp, ok := current(c.controlPlane)
	if !ok || lcp == nil {
		return
	}
	hb, ok := lcp.Curator.(interface {
		HeartbeatAges() map[string]time.Duration
	})
	if !ok {
		return
	}
	for node, age := range hb.HeartbeatAges() {
		ch <- prometheus.MustNewConstMetric(heartbeatDesc, prometheus.GaugeValue, age.Seconds(), node)
	}
}

// current returns v's data if it is set, without waiting.
func current[T any](v event.ValueWatch[T]) (T, bool) {
	w := v.Watch()
	defer w.Close()
	var zero T
	select {
	case <-w.Ready():
	default:
		return zero, false
	}
	d, err := w.Get(context.Background())
	if err != nil {
		return zero, false
	}
	return d, true
}

// metricsWriteTimeout bounds a response of the metrics server, from the
// end of its request's headers: /metrics renders in milliseconds.
// net/http/pprof adds a profile's own length to it (profiles.go bounds
// that).
const metricsWriteTimeout = time.Minute

// serveMetrics returns the runnable of the /metrics server, presenting
// sc where it needs TLS (authorising against the CA of creds).
func (s *Service) serveMetrics(creds *roleserve.Credentials, sc *identity.ServingCertificate, tree event.ValueWatch[supervisor.TreeState]) supervisor.Runnable {
	return func(ctx context.Context) error {
		log := supervisor.Logger(ctx)
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(s.gatherer(tree), promhttp.HandlerOpts{}))
		handleProfiles(mux)
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: metricsWriteTimeout, ErrorLog: zap.NewStdLog(log)}
		// TLS is set up before the port is taken: a failure here must not
		// leave the port bound, or every restart would find it in use.
		var tc *tls.Config
		scheme := "http"
		if metricsNeedTLS(s.cfg.Address) {
			v, err := identity.NewVerifier(creds.CACertificate)
			if err != nil {
				return fmt.Errorf("metrics: %w", err)
			}
			if tc, err = identity.ServerConfig(v, sc); err != nil {
				return fmt.Errorf("metrics: %w", err)
			}
			srv.Handler = s.ownerOnly(v, mux)
			scheme = "https"
		}
		ap := netip.AddrPortFrom(s.cfg.Address, s.cfg.MetricsPort)
		lis, err := net.Listen("tcp", ap.String())
		if err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
		if tc != nil {
			lis = tls.NewListener(lis, tc)
		}
		served := make(chan error, 1)
		go func() { served <- srv.Serve(lis) }()
		log.Info("serving metrics", zap.String("url", scheme+"://"+lis.Addr().String()+"/metrics"))
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		select {
		case err := <-served:
			return fmt.Errorf("metrics: serving: %w", err)
		case <-ctx.Done():
		}
		sctx, cancel := context.WithTimeout(context.Background(), stopGrace)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			srv.Close()
		}
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return ctx.Err()
	}
}

// metricsNeedTLS says whether /metrics at addr is served over mTLS: off
// loopback. A variable so that a test can have TLS on loopback.
var metricsNeedTLS = func(addr netip.Addr) bool { return !addr.IsLoopback() }

// ownerOnly answers only the owner, by the certificate of the TLS
// connection, and only while it is for the current owner key (as the node
// API's callers, see authorize). Nodes are not answered: a node
// certificate stays valid after its node is decommissioned or deleted.
func (s *Service) ownerOnly(v *identity.Verifier, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var id identity.Identity
		var err error
		if r.TLS != nil {
			id, err = v.Identify(r.TLS.PeerCertificates, time.Now())
		}
		if r.TLS == nil || err != nil {
			http.Error(w, "metrics need a client certificate from the cluster CA", http.StatusUnauthorized)
			return
		}
		if err := s.ownerStands(r.Context(), id); err != nil {
			http.Error(w, fmt.Sprintf("%s may not read metrics: %v", id, err), http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}
