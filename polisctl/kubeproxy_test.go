package polisctl

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/polis-os/polis/kube/apiproxy"
	"github.com/polis-os/polis/kube/pki"
)

// apiServerStandIn serves TLS with a serving certificate from the cluster's
// Kubernetes CA (as an apiserver's) on addr, answering each connection's
// first line with its own address.
func apiServerStandIn(t *testing.T, c *pki.Cluster, addr netip.Addr) net.Listener {
	t.Helper()
	pair, err := c.IssueServing([]netip.Addr{addr}, netip.MustParseAddr("10.96.0.1"), nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(pair.Cert, pair.Key)
	if err != nil {
		t.Fatal(err)
	}
	l, err := tls.Listen("tcp", netip.AddrPortFrom(addr, 0).String(), &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				if _, err := bufio.NewReader(conn).ReadString('\n'); err == nil {
					fmt.Fprintf(conn, "%s\n", l.Addr())
				}
			}()
		}
	}()
	return l
}

// kube-proxy relays to an apiserver that answers, and to the next one
// while the first is off; kubectl's TLS, checked against the Kubernetes CA
// under the name every apiserver carries, goes through it (issue 26,
// item 6).
func TestKubeProxyFollowsApiservers(t *testing.T) {
	c, err := pki.NewCluster("polis", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	addrs := subnets.Addrs(2)
	first := apiServerStandIn(t, c, addrs[0])
	second := apiServerStandIn(t, c, addrs[1])
	servers := []netip.AddrPort{netip.MustParseAddrPort(first.Addr().String()), netip.MustParseAddrPort(second.Addr().String())}

	p := &apiproxy.Relay{DialTimeout: kubeProxyDialTimeout}
	p.SetServers(servers)
	l, err := net.Listen("tcp", netip.AddrPortFrom(addrs[0], 0).String())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- p.Serve(ctx, l) }()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()

	caBlock, err := pki.ParseCertificate(c.CACert)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(caBlock)
	call := func() (string, error) {
		conn, err := tls.Dial("tcp", l.Addr().String(), &tls.Config{RootCAs: roots, ServerName: kubeProxyServerName, MinVersion: tls.VersionTLS13})
		if err != nil {
			return "", err
		}
		defer conn.Close()
		fmt.Fprintf(conn, "hello\n")
		line, err := bufio.NewReader(conn).ReadString('\n')
		return strings.TrimSpace(line), err
	}
	if got, err := call(); err != nil || got != first.Addr().String() {
		t.Fatalf("through the relay: %q, %v; want the first apiserver %s", got, err, first.Addr())
	}
	first.Close() // its node is off
	if got, err := call(); err != nil || got != second.Addr().String() {
		t.Fatalf("through the relay with the first apiserver off: %q, %v; want the second %s", got, err, second.Addr())
	}
}
