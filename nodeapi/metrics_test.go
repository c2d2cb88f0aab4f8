package nodeapi_test

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/polis-os/polis/curator"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/nodeapi"
)

// Off loopback, /metrics is served over the node API's mTLS and answers
// the owner only, with a certificate for the current owner key: not a node
// (a node certificate outlives its node's decommissioning), not an owner
// certificate of a rotated-away key.
func TestMetricsOverMTLSAnswersTheCurrentOwnerOnly(t *testing.T) {
	now := time.Now()
	ca, err := identity.NewCA(now)
	if err != nil {
		t.Fatal(err)
	}
	v := ca.Verifier()
	ownerPub, ownerKey, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(kind string) tls.Certificate {
		pub, key, err := ed25519.GenerateKey(nil)
		if err != nil {
			t.Fatal(err)
		}
		if kind == curator.OwnerUserName {
			pub, key = ownerPub, ownerKey
		}
		if kind == "rotated-away owner" {
			kind = curator.OwnerUserName
		}
		var c tls.Certificate
		switch kind {
		case "node":
			cert, err := ca.IssueNode(pub, now)
			if err != nil {
				t.Fatal(err)
			}
			c, err = identity.TLSCertificate(cert, key)
			if err != nil {
				t.Fatal(err)
			}
		case "self-signed":
			cert, err := identity.EphemeralCertificate(key, now)
			if err != nil {
				t.Fatal(err)
			}
			c, err = identity.TLSCertificate(cert, key)
			if err != nil {
				t.Fatal(err)
			}
		default: // a user name
			cert, err := ca.IssueUser(kind, pub, now)
			if err != nil {
				t.Fatal(err)
			}
			c, err = identity.TLSCertificate(cert, key)
			if err != nil {
				t.Fatal(err)
			}
		}
		return c
	}
	sc, err := identity.NewNodeServingCertificate(v, issue("node"))
	if err != nil {
		t.Fatal(err)
	}
	serverCfg, err := identity.ServerConfig(v, sc)
	if err != nil {
		t.Fatal(err)
	}
	currentOwner := func(context.Context) (ed25519.PublicKey, error) { return ownerPub, nil }
	srv := httptest.NewUnstartedServer(nodeapi.OwnerOnly(currentOwner, v, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("metrics"))
	})))
	srv.TLS = serverCfg
	srv.StartTLS()
	defer srv.Close()

	for _, tc := range []struct {
		caller string
		want   int
	}{
		{curator.OwnerUserName, http.StatusOK},
		{"rotated-away owner", http.StatusForbidden},
		{"node", http.StatusForbidden},
		{"alice", http.StatusForbidden},
		{"self-signed", http.StatusForbidden},
		{"anonymous", http.StatusForbidden},
	} {
		cfg := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13} //nolint:gosec // the test checks the server's caller rule, not the client's
		if tc.caller != "anonymous" {
			cfg.Certificates = []tls.Certificate{issue(tc.caller)}
		}
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
		resp, err := client.Get(srv.URL + "/metrics")
		if err != nil {
			t.Errorf("%s: %v", tc.caller, err)
			continue
		}
		resp.Body.Close()
		client.CloseIdleConnections()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: %s, want %d", tc.caller, resp.Status, tc.want)
		}
	}
}
