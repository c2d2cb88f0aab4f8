package consensus

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"
	"math/big"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/polis-os/polis/supervisor"
)

// Revocation.
//
// The CRL is stored in etcd (crlKey), signed by the CA, and replaced with a
// compare-and-swap on every revocation, so concurrent removals from different
// members never lose an entry. Every member mirrors it into a file (see
// layout.crlFile) that etcd's peer listener re-reads on every incoming peer
// connection: etcd's embed.Config.PeerTLSInfo.CRLFile is checked per
// connection by the TLS listener (client/pkg/transport), after the
// handshake, with no caching, so atomically replacing the file is enough for
// a revocation to take effect on new connections without restarting etcd.
// Connections established before the revocation stay up until they break;
// that is harmless because revocation goes with removal, and etcd itself
// drops traffic from removed members.
//
// A custom VerifyPeerCertificate hook would have avoided the file, but embed
// builds the peer tls.Config itself from TLSInfo and offers no hook for it.

// crlRetryInterval is how long the CRL mirror waits before it reads the CRL
// again while its member is a learner (learners cannot watch) or after an
// error.
const crlRetryInterval = time.Second

// newCRL signs a CRL that revokes the certificates of prev (if any) plus
// serials, with a CRL number one higher than prev's.
func newCRL(c *ca, prev *x509.RevocationList, serials []*big.Int, now time.Time) ([]byte, error) {
	if c.key == nil {
		return nil, errors.New("CA key not available")
	}
	number := big.NewInt(1)
	var entries []x509.RevocationListEntry
	if prev != nil {
		number.Add(prev.Number, big.NewInt(1))
		entries = append(entries, prev.RevokedCertificateEntries...)
	}
	for _, s := range serials {
		entries = append(entries, x509.RevocationListEntry{SerialNumber: s, RevocationTime: now})
	}
	tmpl := &x509.RevocationList{
		Number:                    number,
		ThisUpdate:                now,
		NextUpdate:                noExpiry, // replaced on change, never reissued on a schedule
		RevokedCertificateEntries: entries,
	}
	der, err := x509.CreateRevocationList(rand.Reader, tmpl, c.cert, c.key)
	if err != nil {
		return nil, fmt.Errorf("signing CRL: %w", err)
	}
	return der, nil
}

// parseCRL parses a CRL and checks that the CA signed it: a CRL that does not
// verify is never written where etcd would trust it.
func parseCRL(caCert *x509.Certificate, der []byte) (*x509.RevocationList, error) {
	crl, err := x509.ParseRevocationList(der)
	if err != nil {
		return nil, fmt.Errorf("parsing CRL: %w", err)
	}
	if err := crl.CheckSignatureFrom(caCert); err != nil {
		return nil, fmt.Errorf("CRL not signed by the cluster CA: %w", err)
	}
	return crl, nil
}

// isRevoked reports whether crl lists serial.
func isRevoked(crl *x509.RevocationList, serial *big.Int) bool {
	for _, e := range crl.RevokedCertificateEntries {
		if e.SerialNumber.Cmp(serial) == 0 {
			return true
		}
	}
	return false
}

// revoke adds serial to the CRL in etcd. It is idempotent and safe against
// concurrent revocations (compare-and-swap on the CRL's mod revision).
func revoke(ctx context.Context, kv clientv3.KV, c *ca, serial *big.Int) error {
	for {
		resp, err := kv.Get(ctx, crlKey)
		if err != nil {
			return fmt.Errorf("reading CRL: %w", err)
		}
		if len(resp.Kvs) != 1 {
			return errors.New("CRL not found in etcd")
		}
		prev, err := parseCRL(c.cert, resp.Kvs[0].Value)
		if err != nil {
			return err
		}
		if isRevoked(prev, serial) {
			return nil
		}
		der, err := newCRL(c, prev, []*big.Int{serial}, time.Now())
		if err != nil {
			return err
		}
		txn, err := kv.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(crlKey), "=", resp.Kvs[0].ModRevision)).
			Then(clientv3.OpPut(crlKey, string(der))).
			Commit()
		if err != nil {
			return fmt.Errorf("writing CRL: %w", err)
		}
		if txn.Succeeded {
			return nil
		}
		// Someone else revoked a certificate meanwhile: start over from theirs.
	}
}

// runCRLMirror keeps the member's CRL file equal to the CRL in etcd. It runs
// as a child runnable of Run for as long as etcd runs.
func (m *member) runCRLMirror(ctx context.Context) error {
	logger := supervisor.Logger(ctx)
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	for {
		rev, err := m.syncCRL(ctx, logger)
		if err != nil {
			return err
		}
		learner, err := m.isLearner()
		if err != nil {
			return err
		}
		if learner {
			// Learners serve neither watches nor linearizable reads: poll
			// local (serializable) reads until promoted.
			if err := sleepCtx(ctx, crlRetryInterval); err != nil {
				return err
			}
			continue
		}
		if err := m.waitCRLChange(ctx, rev); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			logger.Info("CRL watch ended; reading the CRL again", zap.Error(err))
			if err := sleepCtx(ctx, crlRetryInterval); err != nil {
				return err
			}
		}
	}
}

// syncCRL copies the CRL from etcd to the file if they differ, and returns
// the revision it read at.
func (m *member) syncCRL(ctx context.Context, logger *zap.Logger) (int64, error) {
	var opts []clientv3.OpOption
	if learner, err := m.isLearner(); err != nil {
		return 0, err
	} else if learner {
		opts = append(opts, clientv3.WithSerializable())
	}
	resp, err := m.cli.Get(ctx, crlKey, opts...)
	if err != nil {
		return 0, fmt.Errorf("reading CRL: %w", err)
	}
	if len(resp.Kvs) != 1 {
		// A bootstrap that has not stored the CA yet, or a learner that has
		// not replicated it: keep the file we have.
		return resp.Header.Revision, nil
	}
	der := resp.Kvs[0].Value
	old, err := os.ReadFile(m.layout.crlFile())
	if err == nil && bytes.Equal(old, der) {
		return resp.Header.Revision, nil
	}
	crl, err := parseCRL(m.caCert, der)
	if err != nil {
		return 0, err
	}
	if err := etcdFile(m.layout.crlFile(), false).Write(der); err != nil {
		return 0, fmt.Errorf("writing CRL file: %w", err)
	}
	logger.Info("CRL file updated", zap.Int64("number", crl.Number.Int64()), zap.Int("revoked", len(crl.RevokedCertificateEntries)))
	return resp.Header.Revision, nil
}

// waitCRLChange blocks until the CRL changes after revision rev.
func (m *member) waitCRLChange(ctx context.Context, rev int64) error {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range m.cli.Watch(ctx, crlKey, clientv3.WithRev(rev+1)) {
		if err := wr.Err(); err != nil {
			return err
		}
		if len(wr.Events) > 0 {
			return nil
		}
	}
	return errors.New("watch channel closed")
}

// sleepCtx waits for d or until ctx is done. It paces retries; it is never
// used to wait for a condition.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
