package nodeapi

import (
	"net/http"

	"github.com/polis-os/polis/identity"
)

// OwnerOnly exposes the metrics endpoint's caller check to the tests,
// which live in package nodeapi_test, for a node whose current owner key
// is ownerKey.
func OwnerOnly(ownerKey OwnerKeyFunc, v *identity.Verifier, h http.Handler) http.Handler {
	return (&Service{cfg: Config{OwnerKey: ownerKey}}).ownerOnly(v, h)
}
