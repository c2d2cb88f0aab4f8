package nodeapi_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	cpb "github.com/polis-os/polis/api/curator/v1"
	nodev1 "github.com/polis-os/polis/api/node/v1"
	"github.com/polis-os/polis/curator/client"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/node/nodetest"
	"github.com/polis-os/polis/nodeapi"
	"github.com/polis-os/polis/roleserve"
)

// The tests run real node agents (nodetest), so they are in package
// nodeapi_test: nodetest imports node, which imports nodeapi.

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testutil.EtcdLeakOptions()...)
}

var subnets = testutil.Subnets{Octet: 31}

// dial connects to the node API of the node on addr whose ID is nodeID,
// presenting cert (none if cert is nil).
func dial(t *testing.T, c *nodetest.Cluster, addr netip.Addr, nodeID string, cert *tls.Certificate) *grpc.ClientConn {
	t.Helper()
	v, err := identity.NewVerifier(c.CA)
	if err != nil {
		t.Fatal(err)
	}
	// The owner's configuration checks that the server is nodeID; the
	// certificate presented is then whatever the test says, as an
	// attacker would present it.
	cfg, err := identity.NodeAPIClientConfig(v, c.OwnerCertificate, nodeID)
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.Clone()
	cfg.Certificates = nil
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	conn, err := grpc.NewClient(netip.AddrPortFrom(addr, nodeapi.DefaultPort).String(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// scrape reads url's metrics with Prometheus' own parser.
func scrape(url string) (map[string]*dto.MetricFamily, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// waitServing waits until the node API answers health checks.
func waitServing(t *testing.T, conn *grpc.ClientConn) {
	t.Helper()
	hc := healthpb.NewHealthClient(conn)
	nodetest.Eventually(t, "node API serving", func() error {
		resp, err := hc.Check(nodetest.Context(t), &healthpb.HealthCheckRequest{Service: nodev1.NodeService_ServiceDesc.ServiceName})
		if err != nil {
			return err
		}
		if resp.Status != healthpb.HealthCheckResponse_SERVING {
			return errors.New(resp.Status.String())
		}
		return nil
	})
}

func TestNodeAPI(t *testing.T) {
	c := nodetest.FormCluster(t, 1, &subnets)
	n := c.Node(0)
	owner := dial(t, c, n.Addr, c.IDs[0], &c.OwnerCertificate)
	waitServing(t, owner)
	api := nodev1.NewNodeServiceClient(owner)

	t.Run("CallerRules", func(t *testing.T) {
		nodeCert := n.Credentials(t).TLSCertificate()
		keyHolder, err := identity.EphemeralCertificate(c.OwnerKey, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		khCert, err := identity.TLSCertificate(keyHolder, c.OwnerKey)
		if err != nil {
			t.Fatal(err)
		}
		for name, cert := range map[string]*tls.Certificate{"node": &nodeCert, "key holder": &khCert, "anonymous": nil} {
			stranger := nodev1.NewNodeServiceClient(dial(t, c, n.Addr, c.IDs[0], cert))
			calls := map[string]func(context.Context) error{
				"Logs": func(ctx context.Context) error {
					s, err := stranger.Logs(ctx, &nodev1.LogsRequest{})
					if err != nil {
						return err
					}
					_, err = s.Recv()
					return err
				},
				"GetSupervisorTree": func(ctx context.Context) error {
					_, err := stranger.GetSupervisorTree(ctx, &nodev1.GetSupervisorTreeRequest{})
					return err
				},
				"GetRoleServerGraph": func(ctx context.Context) error {
					_, err := stranger.GetRoleServerGraph(ctx, &nodev1.GetRoleServerGraphRequest{})
					return err
				},
				"Reboot": func(ctx context.Context) error {
					_, err := stranger.Reboot(ctx, &nodev1.RebootRequest{})
					return err
				},
				"PowerOff": func(ctx context.Context) error {
					_, err := stranger.PowerOff(ctx, &nodev1.PowerOffRequest{})
					return err
				},
			}
			// Every RPC the server registers has its row, from the
			// service's descriptor: a new RPC without one fails here.
			sd := nodev1.File_polis_node_v1_nodeapi_proto.Services().ByName("NodeService")
			for i := range sd.Methods().Len() {
				if m := string(sd.Methods().Get(i).Name()); calls[m] == nil {
					t.Errorf("NodeService.%s has no row in CallerRules: decide who may call it and test it", m)
				}
			}
			if len(calls) != sd.Methods().Len() {
				t.Errorf("CallerRules has %d rows, NodeService %d methods", len(calls), sd.Methods().Len())
			}
			for method, call := range calls {
				if code := status.Code(call(nodetest.Context(t))); code != codes.PermissionDenied {
					t.Errorf("%s as %s: code %v, want PermissionDenied", method, name, code)
				}
			}
		}
		select {
		case a := <-n.PowerRequests:
			t.Errorf("a refused caller got the node to %s", a)
		default:
		}
	})

	t.Run("Metrics", func(t *testing.T) {
		url := "http://" + netip.AddrPortFrom(n.Addr, nodeapi.DefaultMetricsPort).String() + "/metrics"
		nodetest.Eventually(t, "every kind of metric scraped", func() error {
			fams, err := scrape(url)
			if err != nil {
				return err
			}
			for _, want := range []struct{ family, label, value string }{
				{"etcd_server_has_leader", "", ""},
				{"polis_curator_grpc_server_handled_total", "grpc_method", "Heartbeat"},
				{"polis_curator_grpc_server_handling_seconds", "grpc_service", "polis.curator.v1.ManagementService"},
				{"polis_supervisor_runnables", "state", "healthy"},
				{"polis_supervisor_runnable_restarts", "runnable", "root.roleserve.heartbeat"},
				{"polis_event_sets_total", "value", "credentials"},
				{"polis_event_watchers", "value", "localRoles"},
				{"polis_curator_node_heartbeat_age_seconds", "node", c.IDs[0]},
			} {
				f := fams[want.family]
				if f == nil {
					return fmt.Errorf("no %s", want.family)
				}
				if want.label == "" {
					continue
				}
				found := false
				for _, m := range f.Metric {
					for _, l := range m.Label {
						found = found || l.GetName() == want.label && l.GetValue() == want.value
					}
				}
				if !found {
					return fmt.Errorf("%s has no %s=%q", want.family, want.label, want.value)
				}
			}
			return nil
		})
	})

	// The agent's Go profiles are served beside /metrics (a goroutine
	// dump here, as `go tool pprof` would ask for one).
	t.Run("Profiles", func(t *testing.T) {
		url := "http://" + netip.AddrPortFrom(n.Addr, nodeapi.DefaultMetricsPort).String() + "/debug/pprof/goroutine?debug=1"
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte("goroutine profile: total")) {
			t.Errorf("GET %s: %s, %.200q; want a goroutine profile", url, resp.Status, body)
		}
		// A profile or trace of an hour, or of nonsense, is refused at
		// once with the reason, rather than taken.
		for _, q := range []string{"profile?seconds=3600", "trace?seconds=3600", "heap?seconds=3600", "profile?seconds=ten"} {
			u := "http://" + netip.AddrPortFrom(n.Addr, nodeapi.DefaultMetricsPort).String() + "/debug/pprof/" + q
			resp, err := http.Get(u)
			if err != nil {
				t.Error(err)
				continue
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest || !bytes.Contains(body, []byte("want a whole number of seconds")) {
				t.Errorf("GET %s: %s, %.200q; want it refused, with the reason", u, resp.Status, body)
			}
		}
		if resp, err := http.Get("http://" + netip.AddrPortFrom(n.Addr, nodeapi.DefaultMetricsPort).String() + "/debug/pprof/cmdline"); err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound {
				t.Errorf("/debug/pprof/cmdline: %s, want 404 (a node's flags are not a profile's)", resp.Status)
			}
		}
	})

	t.Run("SupervisorTree", func(t *testing.T) {
		want := []string{"root", "root.enrolment", "root.nodeapi", "root.nodeapi.grpc", "root.roleserve", "root.roleserve.heartbeat", "root.roleserve.controlplane"}
		nodetest.Eventually(t, "runnables healthy", func() error {
			resp, err := api.GetSupervisorTree(nodetest.Context(t), &nodev1.GetSupervisorTreeRequest{})
			if err != nil {
				return err
			}
			got := map[string]*nodev1.Runnable{}
			for _, r := range resp.Runnables {
				got[r.Name] = r
			}
			if resp.Runnables[0].Name != "root" {
				return errors.New("the root is not first")
			}
			for _, name := range want {
				r := got[name]
				if r == nil {
					return errors.New(name + " missing")
				}
				if name != "root.enrolment" && r.State != nodev1.RunnableState_RUNNABLE_STATE_HEALTHY {
					return errors.New(name + " is " + r.State.String())
				}
				if r.Since.AsTime().IsZero() {
					return errors.New(name + " has no since")
				}
			}
			return nil
		})
	})

	t.Run("RoleServerGraph", func(t *testing.T) {
		resp, err := api.GetRoleServerGraph(nodetest.Context(t), &nodev1.GetRoleServerGraphRequest{})
		if err != nil {
			t.Fatal(err)
		}
		values := map[string]*nodev1.GraphValue{}
		for _, v := range resp.Values {
			values[v.Name] = v
		}
		cred := values["credentials"]
		if cred == nil || cred.Version == 0 || strings.Join(cred.Writers, ",") != "(outside)" || !strings.Contains(cred.Summary, c.IDs[0]) || len(cred.Readers) == 0 {
			t.Errorf("credentials = %v", cred)
		}
		roles := values["localRoles"]
		if roles == nil || strings.Join(roles.Writers, ",") != "rolefetch" {
			t.Errorf("localRoles = %v", roles)
		}
		var workers []string
		for _, w := range resp.Workers {
			workers = append(workers, w.Name)
			if w.Name == "rolefetch" && !strings.Contains(strings.Join(w.Writes, ","), "localRoles") {
				t.Errorf("rolefetch writes %v", w.Writes)
			}
			// The controlplane worker reacted at least once (to the
			// node's credentials and roles) for the node to serve.
			if w.Name == "controlplane" {
				if r := w.LastReaction; r == nil || r.Count == 0 || r.Why == "" || r.Time.AsTime().IsZero() {
					t.Errorf("controlplane's last reaction = %v, want one with its reason", r)
				}
			}
		}
		if !strings.Contains(strings.Join(workers, ","), "controlplane,heartbeat") {
			t.Errorf("workers %v", workers)
		}
	})

	t.Run("Logs", func(t *testing.T) {
		lines := func(req *nodev1.LogsRequest) []*nodev1.LogEntry {
			s, err := api.Logs(nodetest.Context(t), req)
			if err != nil {
				t.Fatal(err)
			}
			var out []*nodev1.LogEntry
			for {
				resp, err := s.Recv()
				if errors.Is(err, io.EOF) {
					return out
				}
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, resp.Entries...)
			}
		}
		all := lines(&nodev1.LogsRequest{MinLevel: nodev1.LogLevel_LOG_LEVEL_DEBUG})
		rs := lines(&nodev1.LogsRequest{Runnable: "root.roleserve", MinLevel: nodev1.LogLevel_LOG_LEVEL_DEBUG})
		if len(rs) == 0 || len(rs) >= len(all) {
			t.Fatalf("%d lines under root.roleserve of %d in all", len(rs), len(all))
		}
		for _, e := range rs {
			if e.Runnable != "root.roleserve" && !strings.HasPrefix(e.Runnable, "root.roleserve.") {
				t.Errorf("line of %s under root.roleserve", e.Runnable)
			}
			if !json.Valid([]byte(e.FieldsJson)) {
				t.Errorf("fields %q", e.FieldsJson)
			}
		}
		for i := 1; i < len(all); i++ {
			if all[i].Seq <= all[i-1].Seq {
				t.Fatalf("lines out of order: %d after %d", all[i].Seq, all[i-1].Seq)
			}
		}
		for _, e := range lines(&nodev1.LogsRequest{MinLevel: nodev1.LogLevel_LOG_LEVEL_WARN}) {
			if e.Level < nodev1.LogLevel_LOG_LEVEL_WARN {
				t.Errorf("%v line with min_level warn: %v", e.Level, e)
			}
		}
		if got := lines(&nodev1.LogsRequest{BacklogLimit: 3}); len(got) != 3 {
			t.Errorf("backlog_limit 3: %d lines", len(got))
		}
		if _, err := api.Logs(nodetest.Context(t), &nodev1.LogsRequest{MinLevel: 99}); err == nil {
			// The error comes with the first Recv on a stream.
			s, _ := api.Logs(nodetest.Context(t), &nodev1.LogsRequest{MinLevel: 99})
			if _, err := s.Recv(); status.Code(err) != codes.InvalidArgument {
				t.Errorf("min_level 99: %v, want InvalidArgument", err)
			}
		}

		// Follow the node API's own warnings, then make one: a Reboot
		// request, which the node logs before it hands it to its power
		// hook.
		ctx, cancel := context.WithCancel(nodetest.Context(t))
		defer cancel()
		s, err := api.Logs(ctx, &nodev1.LogsRequest{Runnable: "root.nodeapi", MinLevel: nodev1.LogLevel_LOG_LEVEL_WARN, Follow: true})
		if err != nil {
			t.Fatal(err)
		}
		for {
			resp, err := s.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if resp.BacklogEnd {
				break
			}
		}
		if _, err := api.Reboot(nodetest.Context(t), &nodev1.RebootRequest{}); err != nil {
			t.Fatal(err)
		}
		if a := <-n.PowerRequests; a != nodeapi.Reboot {
			t.Errorf("power hook got %s", a)
		}
		resp, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if e := resp.Entries[0]; e.Message != "going down on request" || !strings.HasPrefix(e.Runnable, "root.nodeapi") || !strings.Contains(e.FieldsJson, "reboot") {
			t.Errorf("followed %v", e)
		}
	})

	// Last, as it retires the owner certificate the other subtests use:
	// after the owner key is rotated (at the curator), the node API
	// refuses an owner certificate of the old key, as the curator does,
	// and answers one of the new key.
	t.Run("CallerRules/RotatedAwayOwner", func(t *testing.T) {
		v, err := identity.NewVerifier(c.CA)
		if err != nil {
			t.Fatal(err)
		}
		uc, err := identity.UserClientConfig(v, c.OwnerCertificate)
		if err != nil {
			t.Fatal(err)
		}
		curators := []*cpb.CuratorEndpoint{{NodeId: c.IDs[0], Address: n.Addr.String(), Port: roleserve.DefaultCuratorPort}}
		conn, err := client.New(client.Config{Endpoints: curators, TLS: uc})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		newKey, err := identity.GenerateKey()
		if err != nil {
			t.Fatal(err)
		}
		msg := cpb.OwnerKeyRotationMessage(c.CA.Raw, c.OwnerKey.Public().(ed25519.PublicKey))
		resp, err := cpb.NewAAAServiceClient(conn).RotateOwnerKey(nodetest.Context(t), &cpb.RotateOwnerKeyRequest{
			NewOwnerKey:          newKey.Public().(ed25519.PublicKey),
			NewOwnerKeySignature: ed25519.Sign(newKey, msg),
		})
		if err != nil {
			t.Fatalf("RotateOwnerKey: %v", err)
		}
		cert, err := x509.ParseCertificate(resp.OwnerCertificate)
		if err != nil {
			t.Fatal(err)
		}
		newOwner, err := identity.TLSCertificate(cert, newKey)
		if err != nil {
			t.Fatal(err)
		}
		for name, tc := range map[string]struct {
			cert *tls.Certificate
			want codes.Code
		}{
			"the rotated-away owner": {&c.OwnerCertificate, codes.PermissionDenied},
			"the new owner":          {&newOwner, codes.OK},
		} {
			api := nodev1.NewNodeServiceClient(dial(t, c, n.Addr, c.IDs[0], tc.cert))
			_, err := api.GetSupervisorTree(nodetest.Context(t), &nodev1.GetSupervisorTreeRequest{})
			if code := status.Code(err); code != tc.want {
				t.Errorf("GetSupervisorTree as %s: %v, want %v", name, err, tc.want)
			}
		}
	})
}
