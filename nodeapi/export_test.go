package nodeapi

import (
	"net/http"
	"net/netip"

	"github.com/polis-os/polis/identity"
)

// OwnerOnly exposes the metrics endpoint's caller check to the tests,
// which live in package nodeapi_test, for a node whose current owner key
// is ownerKey.
func OwnerOnly(ownerKey OwnerKeyFunc, v *identity.Verifier, h http.Handler) http.Handler {
	return (&Service{cfg: Config{OwnerKey: ownerKey}}).ownerOnly(v, h)
}

// ServeMetricsOverTLS makes every node API of this test binary serve
// /metrics over mTLS, even on loopback, until the returned function is
// called: the tests' nodes run on loopback addresses.
func ServeMetricsOverTLS() (restore func()) {
	old := metricsNeedTLS
	metricsNeedTLS = func(netip.Addr) bool { return true }
	return func() { metricsNeedTLS = old }
}
