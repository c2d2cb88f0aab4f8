package curator

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"fmt"
	"net/netip"
	"time"

	"go.uber.org/zap"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/supervisor"
)

// A curator serves with a curator certificate (identity.CA.IssueCurator),
// the one certificate every client of the curator accepts from a server. A
// curator issues it to itself, from the CA in etcd, and only while its own
// node's record holds ConsensusMember: a role the curator alone gives, and
// the one that gets a node into etcd in the first place. A node
// certificate, which any UP node holds, never serves.
//
// Curator certificates are short-lived (identity.CuratorCertificateLifetime,
// two hours) and renewed here while the curator runs, each time after
// checking the record again. That is how the certificate of a node taken
// out of the control plane (ConsensusMember taken away, decommissioned,
// deleted) stops being accepted: it expires within two hours, whoever kept
// a copy of it and its key, and no client needs a revocation list, which
// it could only fetch from a curator it had not yet reason to trust.

// curatorRenewRetry is how long the renewal worker waits before trying
// again after a failed renewal; the certificate in use stays valid for an
// hour after renewal is due, so there are many attempts.
const curatorRenewRetry = 30 * time.Second

// curatorCertificate checks that this curator's node may serve as a
// curator and issues it a curator certificate naming addr, the address it
// serves on (bound by this process, not reported by anyone).
func (s *Service) curatorCertificate(ctx context.Context, ca *identity.CA, addr netip.Addr) (tls.Certificate, error) {
	n, _, err := getNode(ctx, s.cfg.Client, s.nodeID)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("reading this curator's node record: %w", err)
	}
	if err := mayServeAsCurator(s.nodeID, n); err != nil {
		return tls.Certificate{}, err
	}
	cert, err := ca.IssueCurator(s.cfg.NodeKey.Public().(ed25519.PublicKey), []netip.Addr{addr}, s.cfg.Now())
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("issuing the curator's serving certificate: %w", err)
	}
	return identity.TLSCertificate(cert, s.cfg.NodeKey)
}

// mayServeAsCurator says whether node id, whose record is n (nil if none),
// may serve as a curator: it must be UP and hold ConsensusMember.
func mayServeAsCurator(id string, n *cpb.Node) error {
	switch {
	case n == nil:
		return fmt.Errorf("node %s has no record in the cluster: it may not serve as a curator", id)
	case n.State != cpb.NodeState_NODE_STATE_UP:
		return fmt.Errorf("node %s is %s: only UP nodes holding ConsensusMember serve as curators", id, n.State)
	case n.GetRoles().GetConsensusMember() == nil:
		return fmt.Errorf("node %s does not hold ConsensusMember: it may not serve as a curator", id)
	}
	return nil
}

// renewCertificate replaces the serving certificate once it is due for
// renewal (identity.RenewAt), as long as the node may still serve. When it
// may not (or etcd cannot be read), it logs why and tries again later,
// while the certificate in use runs out; the role server stops this
// curator anyway when the role goes.
//
//	reads:  the clock, this node's record (at each renewal)
//	writes: serving
func (s *Service) renewCertificate(ctx context.Context, ca *identity.CA, serving *identity.ServingCertificate, addr netip.Addr) error {
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	for {
		due := s.renewAt(serving.Leaf())
		t := time.NewTimer(due.Sub(s.cfg.Now()))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		cert, err := s.curatorCertificate(ctx, ca, addr)
		if err == nil {
			err = serving.Replace(cert)
		}
		if err != nil {
			supervisor.Logger(ctx).Warn("renewing the curator certificate", zap.Error(err), zap.Duration("retry_in", curatorRenewRetry))
			t := time.NewTimer(curatorRenewRetry)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
			continue
		}
		supervisor.Logger(ctx).Info("renewed the curator certificate", zap.Time("not_after", serving.Leaf().NotAfter))
	}
}
