package test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/ownerdir"
)

// metricsPort is nodeapi.DefaultMetricsPort, where a node serves /metrics
// (nodeapi is not imported: it would bring the node agent's dependencies,
// WireGuard's control library among them, into this module for one
// number).
const metricsPort = 7837

// cgroupCPUMetric is the node agent's counter of each cgroup's CPU time,
// in seconds (cpu.stat's usage_usec), labelled with the cgroup's path
// under /sys/fs/cgroup: the top two levels of the tree.
const cgroupCPUMetric = "polis_cgroup_cpu_seconds_total"

const (
	// metricsTimeout bounds one scrape: a TLS handshake and the
	// rendering of every metric (etcd's are many) on a TCG VM.
	metricsTimeout = 30 * time.Second
	// maxMetricsBytes bounds what a scrape reads: a node's /metrics is
	// some hundreds of KB; more is an answer this test does not know.
	maxMetricsBytes = 16 << 20
)

// cgroupCPUSample is a node's CPU time so far by cgroup, at one moment.
type cgroupCPUSample struct {
	at      time.Time
	seconds map[string]float64 // by cgroup path, "polis/agent"
}

// nodeMetrics scrapes one node's /metrics as the cluster's owner. It holds
// one HTTP client, so that the connection (through the launcher's proxy,
// with mTLS) is made once and kept between scrapes: a TLS handshake costs
// the VM's emulated CPU, whose use the scrapes are there to measure.
type nodeMetrics struct {
	url    string
	client *http.Client
	// err is why there is no client; every scrape returns it.
	err error
}

// controllerMetrics is the /metrics of the node holding KubernetesController
// among nodes (node 1, which the launcher gives the role), reached through
// proxy with the owner's credentials saved in config. Failing to set it up
// fails no test (its figures are diagnostics): its scrapes return why.
func controllerMetrics(nodes map[string]*cpb.Node, config string, proxy *url.URL) *nodeMetrics {
	var ids []string
	for id, n := range nodes {
		if n.GetRoles().GetKubernetesController() != nil {
			ids = append(ids, id)
		}
	}
	if len(ids) != 1 {
		return &nodeMetrics{err: fmt.Errorf("%d nodes hold KubernetesController (%v), want one controller", len(ids), ids)}
	}
	m, err := newNodeMetrics(ids[0], nodes[ids[0]].GetStatus().GetExternalAddress(), config, proxy)
	if err != nil {
		return &nodeMetrics{err: fmt.Errorf("the controller %s: %w", ids[0], err)}
	}
	return m
}

// newNodeMetrics is a client of node id's /metrics at addr. Off loopback
// /metrics is HTTPS with the node API's mTLS and answers only the owner
// (nodeapi's metrics.go): the client presents the owner's certificate and
// verifies the node's API certificate as identity.NodeAPIClientConfig does
// for the node's own API, which /metrics serves with (a chain to the
// cluster's CA and no other, the node ID as the server's name).
func newNodeMetrics(id, addr, config string, proxy *url.URL) (*nodeMetrics, error) {
	if addr == "" {
		return nil, errors.New("no address in its status")
	}
	d, err := ownerdir.Open(config)
	if err != nil {
		return nil, fmt.Errorf("the owner's configuration: %w", err)
	}
	v, cert, _, err := d.Credentials()
	if err != nil {
		return nil, fmt.Errorf("the owner's credentials: %w", err)
	}
	tc, err := identity.NodeAPIClientConfig(v, cert, id)
	if err != nil {
		return nil, fmt.Errorf("TLS for its node API: %w", err)
	}
	return &nodeMetrics{
		url: (&url.URL{Scheme: "https", Host: net.JoinHostPort(addr, strconv.Itoa(metricsPort)), Path: "/metrics"}).String(),
		client: &http.Client{
			Timeout: metricsTimeout,
			Transport: &http.Transport{
				Proxy:           http.ProxyURL(proxy),
				TLSClientConfig: tc,
				// Uncompressed: gzip would cost the emulated CPU
				// more than the virtual network saves.
				DisableCompression: true,
			},
		},
	}, nil
}

// cgroupCPU scrapes the node's CPU time by cgroup. The sample's time is
// when the answer's header arrived: the handler gathers every metric
// before it writes the header, so that is just after the counters were
// read, give or take one way through the proxy.
func (m *nodeMetrics) cgroupCPU(ctx context.Context) (cgroupCPUSample, error) {
	if m.err != nil {
		return cgroupCPUSample{}, m.err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.url, nil)
	if err != nil {
		return cgroupCPUSample{}, fmt.Errorf("scraping %s: %w", m.url, err)
	}
	// Prometheus' text format, not whatever the handler would choose.
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := m.client.Do(req)
	if err != nil {
		return cgroupCPUSample{}, fmt.Errorf("scraping %s: %w", m.url, err)
	}
	at := time.Now()
	defer resp.Body.Close()
	// Read to the end, so that the connection can serve the next scrape.
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxMetricsBytes+1))
	if err != nil {
		return cgroupCPUSample{}, fmt.Errorf("scraping %s: reading the answer: %w", m.url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return cgroupCPUSample{}, fmt.Errorf("scraping %s: %s: %.200s", m.url, resp.Status, strings.TrimSpace(string(body)))
	}
	if len(body) > maxMetricsBytes {
		return cgroupCPUSample{}, fmt.Errorf("scraping %s: more than %d bytes", m.url, maxMetricsBytes)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		return cgroupCPUSample{}, fmt.Errorf("scraping %s: content type %q, want Prometheus' text format (text/plain)", m.url, ct)
	}
	seconds, err := parseCgroupCPU(string(body))
	if err != nil {
		return cgroupCPUSample{}, fmt.Errorf("scraping %s: %w", m.url, err)
	}
	return cgroupCPUSample{at: at, seconds: seconds}, nil
}

// accountedOnController are the cgroups a Kubernetes controller node
// accounts its programs in (node/pid1, kube/controlplane), each of which
// its /metrics must report.
var accountedOnController = []string{"polis/agent", "kube-controlplane/apiserver", "kube-controlplane/controller-manager", "kube-controlplane/scheduler"}

// checkControllerAccounting fails t unless the controller's /metrics
// reports the CPU of each of accountedOnController: the figures the
// rounds log are diagnostics, that they exist is a feature. A scrape that
// fails is tried again until accountingTimeout (a loaded TCG host may
// answer slowly), not taken as the answer.
func checkControllerAccounting(ctx context.Context, t *testing.T, m *nodeMetrics) {
	t.Helper()
	deadline := time.Now().Add(accountingTimeout)
	for {
		s, err := m.cgroupCPU(ctx)
		if err == nil {
			for _, cg := range accountedOnController {
				if _, ok := s.seconds[cg]; !ok {
					t.Errorf("the controller's /metrics has no %s{cgroup=%q} (it has %v)", cgroupCPUMetric, cg, slices.Sorted(maps.Keys(s.seconds)))
				}
			}
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Errorf("reading the controller's /metrics for its cgroups: %v", err)
			return
		}
		time.Sleep(2 * time.Second) // polling interval of a deadline-bounded wait
	}
}

// accountingTimeout bounds checkControllerAccounting's tries.
const accountingTimeout = 2 * time.Minute

// close closes the kept connection.
func (m *nodeMetrics) close() {
	if m.client != nil {
		m.client.CloseIdleConnections()
	}
}

// parseCgroupCPU reads the samples of cgroupCPUMetric from /metrics in
// Prometheus' text format, by cgroup. It reads the format as the Go client
// writes it and refuses what it does not expect (another label, a
// cgroup twice, a value that is no count of seconds) rather than misread
// it: the module does not import Prometheus' parser (expfmt), which would
// make it a direct requirement of this module for one metric. Other
// metrics' lines are skipped; none of this one is no error (an agent
// without it gives an empty map).
func parseCgroupCPU(text string) (map[string]float64, error) {
	out := map[string]float64{}
	for i, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(line, cgroupCPUMetric)
		if !ok || (rest != "" && rest[0] != '{' && rest[0] != ' ') {
			continue // a comment, a blank line, another metric
		}
		cgroup, value, err := parseCgroupSample(rest)
		if err != nil {
			return nil, fmt.Errorf("line %d %q: %w", i+1, line, err)
		}
		if _, dup := out[cgroup]; dup {
			return nil, fmt.Errorf("line %d %q: cgroup %q a second time", i+1, line, cgroup)
		}
		out[cgroup] = value
	}
	return out, nil
}

// parseCgroupSample parses what follows the metric's name on its line:
// {cgroup="PATH"} VALUE, and an optional timestamp.
func parseCgroupSample(rest string) (cgroup string, value float64, err error) {
	rest, ok := strings.CutPrefix(rest, `{cgroup="`)
	if !ok {
		return "", 0, errors.New(`want {cgroup="…"} and no other label`)
	}
	var b strings.Builder
	for {
		if rest == "" {
			return "", 0, errors.New("the cgroup label's value does not end")
		}
		c := rest[0]
		rest = rest[1:]
		if c == '"' {
			break
		}
		if c == '\\' { // the text format's escapes: \\, \", \n
			if rest == "" {
				return "", 0, errors.New("the cgroup label's value does not end")
			}
			switch rest[0] {
			case '\\', '"':
				c = rest[0]
			case 'n':
				c = '\n'
			default:
				return "", 0, fmt.Errorf("escape \\%c in the cgroup label", rest[0])
			}
			rest = rest[1:]
		}
		b.WriteByte(c)
	}
	cgroup = b.String()
	if cgroup == "" {
		return "", 0, errors.New("an empty cgroup label")
	}
	rest = strings.TrimPrefix(rest, ",") // a trailing comma is allowed
	rest, ok = strings.CutPrefix(rest, "} ")
	if !ok {
		return "", 0, errors.New(`want } and the value after the cgroup label, and no other label`)
	}
	fields := strings.Split(rest, " ")
	if len(fields) > 2 {
		return "", 0, errors.New("want a value and at most a timestamp after the labels")
	}
	if len(fields) == 2 {
		if _, err := strconv.ParseInt(fields[1], 10, 64); err != nil {
			return "", 0, fmt.Errorf("timestamp: %w", err)
		}
	}
	value, err = strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return "", 0, fmt.Errorf("value: %w", err)
	}
	if math.IsNaN(value) || math.IsInf(value, 0) || value < 0 {
		return "", 0, fmt.Errorf("value %v: want seconds of CPU time", value)
	}
	return cgroup, value, nil
}

// since says what share of one CPU each cgroup used between before and s,
// sorted by cgroup: "kube-controlplane/apiserver 31%, polis/agent 12%". Only the
// leaves of the tree the two samples show are listed: a cgroup with a
// child in either is left out, as cgroup v2 keeps processes only in
// leaves, so a parent's time is its children's sum and would count them
// twice (on a controller, "polis" and "kube-controlplane" are left out
// and their children listed).
// A cgroup in one sample only "appeared meanwhile" or is "gone
// meanwhile"; one whose counter went back was made again (its service
// restarted), and says so rather than showing a negative figure.
func (s cgroupCPUSample) since(before cgroupCPUSample) string {
	secs := s.at.Sub(before.at).Seconds()
	if secs <= 0 {
		return "no time passed"
	}
	var names []string
	for name := range before.seconds {
		names = append(names, name)
	}
	for name := range s.seconds {
		if _, ok := before.seconds[name]; !ok {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return "no " + cgroupCPUMetric + " in its metrics"
	}
	slices.Sort(names)
	var parts []string
	for _, name := range names {
		if slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, name+"/") }) {
			continue // not a leaf
		}
		a, okA := before.seconds[name]
		b, okB := s.seconds[name]
		switch {
		case !okA:
			parts = append(parts, name+" appeared meanwhile")
		case !okB:
			parts = append(parts, name+" gone meanwhile")
		case b < a:
			parts = append(parts, name+" restarted meanwhile (its CPU time went back)")
		default:
			parts = append(parts, fmt.Sprintf("%s %.0f%%", name, 100*(b-a)/secs))
		}
	}
	return strings.Join(parts, ", ")
}

// cgroupCPUDuring runs f between two scrapes of m and says what share of
// one CPU each of the node's cgroups used meanwhile (cgroupCPUSample.since),
// or why it could not be read: the figures are diagnostics, and a failed
// scrape fails no test. The scrapes' own work on the node (gathering
// every metric) falls partly into the figure of its agent.
func cgroupCPUDuring(ctx context.Context, m *nodeMetrics, f func()) string {
	before, err := m.cgroupCPU(ctx)
	f()
	if err != nil {
		// No second scrape: it could give no difference, and a node
		// that is not answering would cost a timeout each time.
		return fmt.Sprintf("not read (before: %v)", err)
	}
	after, err := m.cgroupCPU(ctx)
	if err != nil {
		return fmt.Sprintf("not read (after: %v)", err)
	}
	return after.since(before)
}
