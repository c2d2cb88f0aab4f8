package node

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/cenkalti/backoff/v5"
	"go.uber.org/zap"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/roleserve"
	"github.com/polis-os/polis/supervisor"
)

// nodeAPICertificate keeps the serving certificate of the node's own API
// (nodeapi) current: a node API certificate (identity.CA.IssueNodeAPI) for
// the node key, naming the node ID and the address the node's record
// reports, which stock TLS clients verify with the cluster CA alone.
//
// The node asks for one (RenewCertificate, as itself: the answer carries a
// node API certificate beside the node certificate, which this worker
// leaves to enrolment) once it has credentials, again when it is due for
// renewal (identity.RenewAt), and until the certificate names the node's
// configured address: after the address changed, the record names the old
// one until the node's status reaches the curator. It keeps the
// certificate in memory only: a node that starts asks again, and serves
// with its node certificate until it has one (see nodeapi).
//
// It uses the node key rather than a key of its own: the same process
// holds both, so a second key would protect nothing, and the node ID the
// certificate names is the key's (docs/threat-model.md).
//
//	reads:  credentials, directory (the curators to ask)
//	writes: the node API certificate
type nodeAPICertificate struct {
	address     netip.Addr
	now         func() time.Time
	renewAt     func(*x509.Certificate) time.Time
	credentials event.ValueWatch[*roleserve.Credentials]
	directory   event.ValueWatch[[]*cpb.CuratorEndpoint]
	cert        event.Value[*x509.Certificate]
}

// nodeAPIRetryMax bounds the wait between failed attempts.
const nodeAPIRetryMax = time.Minute

func (w *nodeAPICertificate) run(ctx context.Context) error {
	logger := supervisor.Logger(ctx)
	cw := w.credentials.Watch()
	defer cw.Close()
	nonNil := event.Filter(func(c *roleserve.Credentials) bool { return c != nil })
	creds, err := cw.Get(ctx, nonNil)
	if err != nil {
		return err
	}
	// Renewed credentials are picked up between attempts.
	updates := make(chan *roleserve.Credentials)
	go func() {
		for {
			c, err := cw.Get(ctx, nonNil)
			if err != nil {
				return
			}
			select {
			case updates <- c:
			case <-ctx.Done():
				return
			}
		}
	}()
	supervisor.Signal(ctx, supervisor.SignalHealthy)

	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 500 * time.Millisecond
	bo.MaxInterval = nodeAPIRetryMax
	var cur *x509.Certificate
	for {
		var wait time.Duration
		var due time.Time
		if cur != nil {
			due = w.renewAt(cur)
		}
		switch {
		case cur != nil && namesAddress(cur, w.address) && w.now().Before(due):
			wait = due.Sub(w.now())
		default:
			next, err := w.fetch(ctx, creds)
			switch {
			case err != nil:
				wait = bo.NextBackOff()
				logger.Warn("obtaining the node API certificate", zap.Error(err), zap.Duration("retry_in", wait))
			case !namesAddress(next, w.address):
				// Better than the node certificate: it names the node
				// ID. Ask again until the record has the new address.
				cur = next
				w.cert.Set(cur)
				wait = bo.NextBackOff()
				logger.Info("the node API certificate names another address than this node's; the cluster has not heard of the new one yet", zap.Stringer("address", w.address), zap.Any("named", next.IPAddresses), zap.Duration("retry_in", wait))
			default:
				cur = next
				w.cert.Set(cur)
				bo.Reset()
				logger.Info("obtained the node API certificate", zap.Time("expires", cur.NotAfter), zap.Time("renew_at", w.renewAt(cur)))
				continue
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case c := <-updates:
			t.Stop()
			creds = c
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

// fetch asks the cluster for a node API certificate, as the node.
func (w *nodeAPICertificate) fetch(ctx context.Context, creds *roleserve.Credentials) (*x509.Certificate, error) {
	resp, err := renewCertificate(ctx, creds, w.directory)
	if err != nil {
		return nil, err
	}
	if len(resp.NodeApiCertificate) == 0 {
		return nil, errors.New("the curator's answer carries no node API certificate (a curator older than this node?)")
	}
	cert, err := x509.ParseCertificate(resp.NodeApiCertificate)
	if err != nil {
		return nil, fmt.Errorf("the curator's node API certificate: %w", err)
	}
	if k, ok := cert.PublicKey.(ed25519.PublicKey); !ok || !k.Equal(creds.Key.Public()) {
		return nil, errors.New("the curator's node API certificate is for another key")
	}
	// What nodeapi will serve with: checked now, so that a bad answer is
	// retried here rather than refused there.
	verifier, err := identity.NewVerifier(creds.CACertificate)
	if err != nil {
		return nil, err
	}
	if _, err := identity.NewNodeServingCertificate(verifier, tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: creds.Key, Leaf: cert}); err != nil {
		return nil, fmt.Errorf("the curator's node API certificate: %w", err)
	}
	return cert, nil
}

// namesAddress reports whether cert names addr, or addr is one no
// certificate names (unspecified).
func namesAddress(cert *x509.Certificate, addr netip.Addr) bool {
	if !addr.IsValid() || addr.IsUnspecified() {
		return true
	}
	for _, ip := range cert.IPAddresses {
		if a, ok := netip.AddrFromSlice(ip); ok && a.Unmap() == addr.Unmap() {
			return true
		}
	}
	return false
}
