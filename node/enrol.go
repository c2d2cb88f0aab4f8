package node

import (
	"context"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"time"

	"github.com/cenkalti/backoff/v5"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	cpb "github.com/polis-os/polis/api/curator/v1"
	nodev1 "github.com/polis-os/polis/api/node/v1"
	"github.com/polis-os/polis/curator"
	"github.com/polis-os/polis/curator/client"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/internal/failpoint"
	"github.com/polis-os/polis/localstorage"
	"github.com/polis-os/polis/roleserve"
	"github.com/polis-os/polis/supervisor"
)

// enrolment obtains the node's credentials in its cluster and writes them,
// with the sealed configuration last: a node with a sealed configuration is
// enrolled, one without starts enrolment over. Every step before is
// idempotent or recognised when it is repeated, so a crash anywhere ends in
// the same node, UP, after a restart: the key is stored before the cluster
// hears of it; Register again is harmless while the node is NEW or
// STANDBY, and once the cluster counts it as UP (it committed, then
// crashed before saving the answer) the node joins instead. The ticket is
// forgotten once the sealed configuration is written. The crash at each
// step is tested with failpoints (see failpoint_test.go and
// docs/threat-model.md).
//
// There are three ways in, and all end with a curator RPC made as a key
// holder (the node proves its key, not a certificate):
//
//   - register: Register with the ticket, then CommitRegistration until an
//     operator has approved the node;
//
//   - bootstrap: the controlplane worker initialises the cluster, and the
//     node Joins through its own curator, like any node after a reboot;
//
//   - rejoin after a reboot: certificates still good are used as they are;
//     otherwise the node Joins through the curators it knew.
//
// Once enrolled, it keeps the certificate fresh: when it is due for
// renewal, the node asks for a new one (RenewCertificate, as itself) and
// publishes the new credentials.
//
//	reads:  localControlPlane (to reach this node's own curator),
//	directory (the curators the node knew)
//	writes: credentials
type enrolment struct {
	root   *localstorage.Root
	sealer localstorage.Sealer
	key    ed25519.PrivateKey
	// register is set when the node registers into a cluster.
	register *nodev1.ClusterRegister
	// ca is the cluster CA when known before enrolling (register, rejoin);
	// nil when bootstrapping, where the node's own curator tells it.
	ca *x509.Certificate
	// localCurator is set when this node's own curator is the way in
	// (bootstrap, or a control-plane node rejoining).
	localCurator bool
	// enrolled is set when the node has its sealed configuration.
	enrolled bool
	// curators are the curators the node knew when it started (its saved
	// directory, or its parameters'): the way back in after a reboot, and
	// its credentials' curators until the directory worker knows better.
	curators []*cpb.CuratorEndpoint
	// status is the node's status to register with.
	status *cpb.NodeStatus
	now    func() time.Time
	// renewAt says when a certificate is due for renewal: identity.RenewAt,
	// replaced by tests.
	renewAt func(*x509.Certificate) time.Time

	local       event.ValueWatch[*roleserve.LocalControlPlane]
	directory   event.ValueWatch[[]*cpb.CuratorEndpoint]
	credentials event.Value[*roleserve.Credentials]
}

func (e *enrolment) run(ctx context.Context) error {
	creds, err := e.obtain(ctx)
	if err != nil {
		return err
	}
	e.credentials.Set(creds)
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	return e.renewLoop(ctx, creds)
}

// obtain returns the node's credentials: the stored ones if still good,
// otherwise new ones from the cluster.
func (e *enrolment) obtain(ctx context.Context) (*roleserve.Credentials, error) {
	logger := supervisor.Logger(ctx)
	if creds, err := e.persisted(); err == nil {
		logger.Info("using the node's stored certificate", zap.String("node", creds.NodeID), zap.Time("renew_at", e.renewAt(creds.Certificate)))
		if !e.enrolled {
			// A crash came after the certificate was saved and before
			// the sealed configuration: finish what was interrupted.
			if err := e.seal(creds.CACertificate); err != nil {
				return nil, err
			}
		}
		return creds, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		logger.Info("the stored certificate cannot be used; enrolling again", zap.Error(err))
	}

	conn, ca, err := e.dial(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if err := e.failpoint("connected"); err != nil {
		return nil, err
	}
	cur := cpb.NewCuratorServiceClient(conn)

	var cert []byte
	var dir *cpb.ClusterDirectory
	if e.register != nil {
		cert, dir, err = e.registerAndCommit(ctx, cur)
	} else {
		cert, dir, err = e.join(ctx, cur)
	}
	if err != nil {
		return nil, fmt.Errorf("enrolling: %w", err)
	}
	creds, err := e.save(cert, ca, dir)
	if err != nil {
		return nil, err
	}
	logger.Info("enrolled", zap.String("node", creds.NodeID))
	return creds, nil
}

// failpoint is where a test may crash the node (see internal/failpoint):
// after each step of enrolment that changes the cluster.
func (e *enrolment) failpoint(step string) error {
	return failpoint.Inject(e.root.Dir + ": enrolment: " + step)
}

// join asks for a certificate as an UP node that proves its key: after a
// reboot, and after a crash that came between the commit of a registration
// and saving its answer.
func (e *enrolment) join(ctx context.Context, cur cpb.CuratorServiceClient) ([]byte, *cpb.ClusterDirectory, error) {
	resp, err := cur.Join(ctx, &cpb.JoinRequest{})
	if err != nil {
		id := identity.NodeID(e.key.Public().(ed25519.PublicKey))
		switch status.Code(err) {
		case codes.NotFound:
			return nil, nil, fmt.Errorf("joining: the cluster does not know this node (%s): it was deleted; to add the machine again, wipe its storage and register it with new parameters (polisctl ticket --parameters): %w", id, err)
		case codes.FailedPrecondition:
			return nil, nil, fmt.Errorf("joining: the cluster refuses this node (%s), which it no longer counts as UP (decommissioned?); to add the machine again, wipe its storage and register it as a new node: %w", id, err)
		}
		return nil, nil, fmt.Errorf("joining: %w", err)
	}
	if err := e.failpoint("joined"); err != nil {
		return nil, nil, err
	}
	return resp.NodeCertificate, resp.ClusterDirectory, nil
}

// renewLoop renews the node's certificate whenever it is due (two thirds
// into its lifetime, see identity.RenewAt), as the node itself, and
// publishes the new credentials. A failed renewal ends the run: the restart
// tries again, and once the certificate is no longer good it rejoins as a
// key holder instead.
func (e *enrolment) renewLoop(ctx context.Context, creds *roleserve.Credentials) error {
	logger := supervisor.Logger(ctx)
	for {
		at := e.renewAt(creds.Certificate)
		if wait := at.Sub(e.now()); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
		}
		next, err := e.renew(ctx, creds)
		if err != nil {
			return fmt.Errorf("renewing the node certificate (due since %v): %w", at, err)
		}
		logger.Info("renewed the node certificate", zap.Time("expires", next.Certificate.NotAfter), zap.Time("renew_at", e.renewAt(next.Certificate)))
		e.credentials.Set(next)
		creds = next
	}
}

// renewCertificate calls RenewCertificate as the node holding creds, at
// its credentials' curators or those directory lists: the answer carries
// a fresh node certificate and a node API certificate.
func renewCertificate(ctx context.Context, creds *roleserve.Credentials, directory event.ValueWatch[[]*cpb.CuratorEndpoint]) (*cpb.RenewCertificateResponse, error) {
	verifier, err := identity.NewVerifier(creds.CACertificate)
	if err != nil {
		return nil, err
	}
	tlsCfg, err := identity.NodeClientConfig(verifier, creds.TLSCertificate())
	if err != nil {
		return nil, err
	}
	conn, err := client.New(client.Config{Endpoints: creds.Curators, Directory: directory, TLS: tlsCfg, Logger: supervisor.Logger(ctx).Named("client")})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return cpb.NewCuratorServiceClient(conn).RenewCertificate(ctx, &cpb.RenewCertificateRequest{})
}

// renew asks the cluster for a fresh certificate for the node's key and
// stores it.
func (e *enrolment) renew(ctx context.Context, creds *roleserve.Credentials) (*roleserve.Credentials, error) {
	resp, err := renewCertificate(ctx, creds, e.directory)
	if err != nil {
		return nil, err
	}
	next, err := e.credentialsFrom(resp.NodeCertificate, creds.CACertificate.Raw)
	if err != nil {
		return nil, fmt.Errorf("the curator's answer: %w", err)
	}
	if err := e.root.Data.Node.Certificate.Write(resp.NodeCertificate); err != nil {
		return nil, err
	}
	next.Curators = creds.Curators
	return next, nil
}

// dial connects to the cluster's curators as a key holder.
func (e *enrolment) dial(ctx context.Context) (*grpc.ClientConn, *x509.Certificate, error) {
	ca := e.ca
	endpoints := e.curators
	if e.register != nil {
		endpoints = e.register.GetClusterDirectory().GetCurators()
	}
	if e.localCurator {
		local, err := event.Get(ctx, e.local, event.Filter(func(l *roleserve.LocalControlPlane) bool { return l != nil }))
		if err != nil {
			return nil, nil, fmt.Errorf("waiting for this node's curator: %w", err)
		}
		// nil once a curator stopped serving: wait for one that serves.
		st, err := event.Get(ctx, local.Curator.Status(), event.Filter(func(s *curator.Status) bool { return s != nil }))
		if err != nil {
			return nil, nil, fmt.Errorf("waiting for this node's curator: %w", err)
		}
		if ca == nil {
			if ca, err = x509.ParseCertificate(st.CACertificate); err != nil {
				return nil, nil, fmt.Errorf("the local curator's CA certificate: %w", err)
			}
		}
		endpoints = append(endpoints, st.Endpoint())
	}
	if ca == nil && e.register != nil {
		var err error
		if ca, err = e.learnCA(ctx, endpoints); err != nil {
			return nil, nil, err
		}
		// For the rest of this run: the stored credentials are checked
		// against it, and a retry need not ask again.
		e.ca = ca
	}
	if ca == nil {
		return nil, nil, errors.New("no cluster CA certificate to check curators against")
	}
	verifier, err := identity.NewVerifier(ca)
	if err != nil {
		return nil, nil, err
	}
	tlsCfg, err := identity.KeyHolderClientConfig(verifier, e.key)
	if err != nil {
		return nil, nil, err
	}
	cfg := client.Config{Endpoints: endpoints, TLS: tlsCfg, Logger: supervisor.Logger(ctx).Named("client")}
	if e.register == nil {
		cfg.Directory = e.directory
	}
	conn, err := client.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	return conn, ca, nil
}

// learnCA learns the cluster CA certificate from the curators listed in
// the node's parameters, which carry the register ticket but not the CA
// (the launcher wrote them before the first node had made the cluster). A
// curator's answer counts only with its proof that it knows the ticket
// (curator.RegisterTicketProof), made over a fresh challenge of this
// node's and over the CA certificate it sent, and only if the curator's
// own TLS certificate is from that CA: a server in the middle can neither
// forge the proof nor pass a real one off for another CA. The ticket
// itself goes out only afterwards, in Register, to a curator checked
// against the CA. While no curator answers (the first node may still be
// booting), it asks again with backoff, and logs what it waits for. A
// curator that answers without the proof is an error: the ticket was
// rotated, or the address is not this cluster's.
func (e *enrolment) learnCA(ctx context.Context, endpoints []*cpb.CuratorEndpoint) (*x509.Certificate, error) {
	logger := supervisor.Logger(ctx)
	// Short waits: an attempt costs a connection refused while the
	// curator is not up, and every second of backoff is a second the
	// node may wait after it is.
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 200 * time.Millisecond
	bo.MaxInterval = time.Second
	start := e.now()
	for attempt := 1; ; attempt++ {
		var unreachable []string
		for _, ep := range endpoints {
			ap := netip.AddrPortFrom(netip.MustParseAddr(ep.Address), uint16(ep.Port))
			ca, err := askCA(ctx, ap, e.register.RegisterTicket)
			if err == nil {
				sum := sha256.Sum256(ca.Raw)
				logger.Info("learned the cluster CA from a curator that proved it knows the register ticket", zap.Stringer("curator", ap), zap.String("ca_sha256", hex.EncodeToString(sum[:])), zap.Duration("waited", e.now().Sub(start)))
				return ca, nil
			}
			if errors.Is(err, errTicketNotProven) {
				return nil, fmt.Errorf("learning the cluster CA from the curator at %v: %w", ap, err)
			}
			unreachable = append(unreachable, fmt.Sprintf("%v: %v", ap, err))
		}
		wait := bo.NextBackOff()
		if attempt&(attempt-1) == 0 { // the 1st, 2nd, 4th, 8th, ... attempt
			logger.Info("waiting for a curator to answer, to learn the cluster CA (the parameters carry the register ticket, not the CA)", zap.Strings("curators", unreachable), zap.Int("attempts", attempt), zap.Duration("waited", e.now().Sub(start)))
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("waiting for a curator to learn the cluster CA from: %w", ctx.Err())
		}
	}
}

// errTicketNotProven is askCA's error for a curator that answered without
// a valid proof of the register ticket.
var errTicketNotProven = errors.New("it does not prove that it knows this node's register ticket: the ticket was rotated (start the node with new parameters: polisctl ticket --parameters), or the address is not this cluster's curator")

// askCATimeout bounds one curator's answer in learnCA, so that an address
// that swallows packets does not hold up the others.
const askCATimeout = 5 * time.Second

// askCA asks the curator at ap for the CA certificate with a fresh
// challenge and checks its answer (see learnCA). The connection trusts
// nothing yet: the proof and the curator's certificate are checked after.
func askCA(ctx context.Context, ap netip.AddrPort, ticket []byte) (*x509.Certificate, error) {
	ctx, cancel := context.WithTimeout(ctx, askCATimeout)
	defer cancel()
	challenge := make([]byte, curator.RegisterTicketChallengeSize)
	if _, err := rand.Read(challenge); err != nil {
		return nil, err
	}
	// The server is checked below, against the CA the proof vouches for.
	tc, served := identity.FirstContactConfig()
	conn, err := grpc.NewClient(ap.String(), grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	resp, err := cpb.NewCuratorServiceClient(conn).GetCACertificate(ctx, &cpb.GetCACertificateRequest{RegisterTicketChallenge: challenge})
	if err != nil {
		return nil, err
	}
	if !hmac.Equal(resp.RegisterTicketProof, curator.RegisterTicketProof(ticket, challenge, resp.CaCertificate)) {
		return nil, errTicketNotProven
	}
	ca, err := x509.ParseCertificate(resp.CaCertificate)
	if err != nil {
		return nil, fmt.Errorf("the CA certificate it sent: %w", err)
	}
	if sc := served(); sc == nil || sc.CheckSignatureFrom(ca) != nil {
		return nil, fmt.Errorf("%w (its own certificate is not from the CA it sent)", errTicketNotProven)
	}
	return ca, nil
}

// registerAndCommit registers the node and waits until an operator has
// approved it. A node the cluster already counts as UP committed before
// and crashed before it saved the answer: it joins instead.
func (e *enrolment) registerAndCommit(ctx context.Context, cur cpb.CuratorServiceClient) ([]byte, *cpb.ClusterDirectory, error) {
	logger := supervisor.Logger(ctx)
	reg, err := cur.Register(ctx, &cpb.RegisterRequest{RegisterTicket: e.register.RegisterTicket, Status: e.status})
	switch status.Code(err) {
	case codes.OK:
	case codes.AlreadyExists:
		logger.Info("the cluster counts this node as UP already (it committed its registration before a crash); joining")
		return e.join(ctx, cur)
	case codes.PermissionDenied:
		return nil, nil, fmt.Errorf("registering: the cluster refuses this node: if the register ticket was rotated, start the node with new parameters (polisctl ticket --parameters); if the node was decommissioned, wipe its storage to register it as a new node: %w", err)
	default:
		return nil, nil, fmt.Errorf("registering: %w", err)
	}
	if err := e.failpoint("registered"); err != nil {
		return nil, nil, err
	}
	logger.Info("registered; waiting for an operator to approve this node", zap.String("node", reg.NodeId))
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 200 * time.Millisecond
	bo.MaxInterval = 5 * time.Second
	for {
		resp, err := cur.CommitRegistration(ctx, &cpb.CommitRegistrationRequest{})
		switch status.Code(err) {
		case codes.OK:
			if err := e.failpoint("committed"); err != nil {
				return nil, nil, err
			}
			return resp.NodeCertificate, resp.ClusterDirectory, nil
		case codes.FailedPrecondition:
			// NEW (not approved yet), or decommissioned meanwhile: the
			// curator's message says which.
			logger.Info("not approved yet", zap.String("node", reg.NodeId), zap.String("curator_says", status.Convert(err).Message()))
		case codes.Unavailable:
			// No leader for a moment, or the answer was lost: the commit
			// is idempotent, so ask again.
			logger.Info("the curators cannot answer; asking again", zap.String("node", reg.NodeId), zap.Error(err))
		case codes.NotFound:
			return nil, nil, fmt.Errorf("committing the registration: the node was deleted while it waited for approval; it registers again: %w", err)
		default:
			return nil, nil, fmt.Errorf("committing the registration: %w", err)
		}
		wait := bo.NextBackOff()
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, nil, ctx.Err()
		}
	}
}

// persisted returns the stored credentials if they are complete, belong to
// this node's key, and are not due for renewal.
func (e *enrolment) persisted() (*roleserve.Credentials, error) {
	certDER, err := e.root.Data.Node.Certificate.Read()
	if err != nil {
		return nil, err
	}
	caDER, err := e.root.Data.Node.CACertificate.Read()
	if err != nil {
		return nil, err
	}
	creds, err := e.credentialsFrom(certDER, caDER)
	if err != nil {
		return nil, err
	}
	if e.ca != nil && !creds.CACertificate.Equal(e.ca) {
		return nil, errors.New("the stored certificate is from another cluster than the node's sealed configuration or parameters name")
	}
	if !e.now().Before(e.renewAt(creds.Certificate)) {
		return nil, fmt.Errorf("the certificate is due for renewal since %v", e.renewAt(creds.Certificate))
	}
	creds.Curators = e.curators
	return creds, nil
}

func (e *enrolment) credentialsFrom(certDER, caDER []byte) (*roleserve.Credentials, error) {
	cert, err := x509.ParseCertificate(certDER)
	if err != nil {
		return nil, fmt.Errorf("the node certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("the CA certificate: %w", err)
	}
	pub := e.key.Public().(ed25519.PublicKey)
	if k, ok := cert.PublicKey.(ed25519.PublicKey); !ok || !k.Equal(pub) {
		return nil, errors.New("the node certificate is for another key")
	}
	if err := cert.CheckSignatureFrom(ca); err != nil {
		return nil, fmt.Errorf("the node certificate is not from the cluster CA: %w", err)
	}
	return &roleserve.Credentials{NodeID: identity.NodeID(pub), Key: e.key, Certificate: cert, CACertificate: ca}, nil
}

// save writes the credentials and the cluster directory, then the sealed
// configuration, which marks the node as enrolled.
func (e *enrolment) save(certDER []byte, ca *x509.Certificate, dir *cpb.ClusterDirectory) (*roleserve.Credentials, error) {
	creds, err := e.credentialsFrom(certDER, ca.Raw)
	if err != nil {
		return nil, fmt.Errorf("the curator's answer: %w", err)
	}
	if err := e.root.Data.Node.Certificate.Write(certDER); err != nil {
		return nil, err
	}
	if err := e.root.Data.Node.CACertificate.Write(ca.Raw); err != nil {
		return nil, err
	}
	if dir != nil {
		if err := e.root.ESP.ClusterDirectory.WriteProto(dir); err != nil {
			return nil, err
		}
		creds.Curators = dir.Curators
	}
	if len(creds.Curators) == 0 {
		creds.Curators = e.curators
	}
	if err := e.seal(ca); err != nil {
		return nil, err
	}
	return creds, nil
}

// seal writes the sealed configuration, which marks the node as enrolled,
// and then forgets the register ticket, which it never needs again.
func (e *enrolment) seal(ca *x509.Certificate) error {
	if err := writeSealedConfiguration(e.root, e.sealer, &nodev1.SealedConfiguration{NodePrivateKeySeed: e.key.Seed(), CaCertificate: ca.Raw}); err != nil {
		return err
	}
	e.enrolled = true
	return forgetTicket(e.root.ESP.NodeParameters)
}
