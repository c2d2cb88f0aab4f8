package testutil

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"
)

// ServeMutualTLS serves h over TLS on a loopback port until the test ends,
// as an apiserver would: with the serving certificate and key in certPEM
// and keyPEM, and only to clients with a certificate that caPEM's CA
// issued. It returns the address served.
func ServeMutualTLS(t testing.TB, h http.Handler, certPEM, keyPEM, caPEM []byte) netip.AddrPort {
	t.Helper()
	addr, _ := StoppableMutualTLS(t, h, certPEM, keyPEM, caPEM)
	return addr
}

// StoppableMutualTLS is ServeMutualTLS with a stop, for a test of what
// happens when the server goes away: stop closes the server and its
// connections, after which nothing answers at the address. It may be
// called more than once; the test's end calls it too.
func StoppableMutualTLS(t testing.TB, h http.Handler, certPEM, keyPEM, caPEM []byte) (netip.AddrPort, func()) {
	t.Helper()
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatalf("the serving certificate: %v", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("the client CA: no certificate in its PEM")
	}
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: roots, ClientAuth: tls.RequireAndVerifyClientCert}
	srv.StartTLS()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			srv.CloseClientConnections()
			srv.Close()
		})
	}
	t.Cleanup(stop)
	return netip.MustParseAddrPort(srv.Listener.Addr().String()), stop
}
