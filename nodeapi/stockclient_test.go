package nodeapi_test

import (
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	nodev1 "github.com/polis-os/polis/api/node/v1"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/node/nodetest"
	"github.com/polis-os/polis/nodeapi"
)

// A node serves its API and /metrics with a node API certificate that a
// stock TLS client verifies, as grpcurl -cacert and curl --cacert do: the
// cluster CA as the only root, the node ID (or the node's address) as the
// server name, and no custom verification. A wrong server name fails.
func TestStockClientsVerifyTheNodeAPI(t *testing.T) {
	// Registered first, so it runs after the cluster has stopped.
	t.Cleanup(nodeapi.ServeMetricsOverTLS())
	c := nodetest.FormCluster(t, 1, &subnets)
	n := c.Node(0)
	id := c.IDs[0]
	roots := x509.NewCertPool()
	roots.AddCert(c.CA)
	stock := func(serverName string) *tls.Config {
		return &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: roots, ServerName: serverName, Certificates: []tls.Certificate{c.OwnerCertificate}}
	}
	pub, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	otherID := identity.NodeID(pub)

	health := func(cfg *tls.Config) error {
		conn, err := grpc.NewClient(netip.AddrPortFrom(n.Addr, nodeapi.DefaultPort).String(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			return err
		}
		defer conn.Close()
		resp, err := healthpb.NewHealthClient(conn).Check(nodetest.Context(t), &healthpb.HealthCheckRequest{Service: nodev1.NodeService_ServiceDesc.ServiceName})
		if err != nil {
			return err
		}
		if resp.Status != healthpb.HealthCheckResponse_SERVING {
			return fmt.Errorf("health: %s", resp.Status)
		}
		return nil
	}
	metrics := func(cfg *tls.Config, host string) error {
		tr := &http.Transport{TLSClientConfig: cfg}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr}).Get("https://" + netip.AddrPortFrom(n.Addr, nodeapi.DefaultMetricsPort).String() + "/metrics")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "polis_supervisor_runnables") {
			return fmt.Errorf("GET /metrics (%s): %s", host, resp.Status)
		}
		return nil
	}

	// The node serves with its node certificate until its node API
	// certificate comes: wait for a stock client to succeed.
	nodetest.Eventually(t, "the node API verified by a stock client", func() error { return health(stock(id)) })
	if err := health(stock(n.Addr.String())); err != nil {
		t.Errorf("a stock client dialling the node's address: %v", err)
	}
	if err := health(stock(otherID)); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a stock client dialling another node ID: %v, want a certificate error", err)
	}
	// curl --cacert: the server name is the host of the URL, the address.
	addrCfg := stock("")
	if err := metrics(addrCfg, n.Addr.String()); err != nil {
		t.Errorf("/metrics by address: %v", err)
	}
	if err := metrics(stock(id), id); err != nil {
		t.Errorf("/metrics by node ID: %v", err)
	}
	if err := metrics(stock(otherID), otherID); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("/metrics dialled as another node ID: %v, want a certificate error", err)
	}

	// The agent's profiles, beside /metrics, answer the owner and no
	// one else.
	profile := func(cfg *tls.Config) (int, error) {
		tr := &http.Transport{TLSClientConfig: cfg}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr}).Get("https://" + netip.AddrPortFrom(n.Addr, nodeapi.DefaultMetricsPort).String() + "/debug/pprof/goroutine?debug=1")
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := profile(stock("")); err != nil || code != http.StatusOK {
		t.Errorf("a goroutine profile as the owner: %d, %v; want 200", code, err)
	}
	anonymous := stock("")
	anonymous.Certificates = nil
	if code, err := profile(anonymous); err == nil && code == http.StatusOK {
		t.Errorf("a goroutine profile without a certificate was answered")
	}
}
