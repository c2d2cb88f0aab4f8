package consensus

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/tlsutil"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/client/pkg/v3/types"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/pkg/v3/featuregate"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/features"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/event/memory"
	"github.com/polis-os/polis/supervisor"
)

// statusInterval bounds how stale Status can get for changes etcd does not
// notify (a promotion decided by another member, a membership change).
// Leader changes and this member's own promotion are published at once.
const statusInterval = time.Second

// clientDialTimeout bounds the dial of the local client; the socket is local,
// so anything longer means etcd is not serving.
const clientDialTimeout = 10 * time.Second

// StatusName is the name of a Service's status value (event.Info), by
// which the role server's graph and the node API know it.
const StatusName = "consensus.status"

// Service runs one consensus member. Make it with New, run it with Run under
// a supervisor, and follow it with Status.
type Service struct {
	cfg     Config
	status  memory.Value[*Status]
	running atomic.Bool
}

// New validates cfg, applies its defaults and returns a service ready to Run.
// It does not touch the disk: whether the data directory matches cfg is
// checked by Run, every time it starts.
func New(cfg Config) (*Service, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("consensus config: %w", err)
	}
	s := &Service{cfg: cfg}
	s.status.Name = StatusName
	s.status.Equal = statusEqual
	return s, nil
}

// Status returns the member's status value. It is unset until Run first
// starts, then follows Run: starting, running (updated on leader changes and
// promotion), stopped.
func (s *Service) Status() event.ValueWatch[*Status] { return &s.status }

// member is the state of one Run once etcd is ready; running Statuses point
// to it.
type member struct {
	cfg    *Config
	layout layout
	etcd   *embed.Etcd
	cli    *clientv3.Client
	caCert *x509.Certificate
	// kick makes Run publish a fresh status now (after a promotion).
	kick chan struct{}
}

// Run is the supervised runnable of the member: it prepares the data
// directory, starts etcd, publishes the status, keeps the CRL file in sync
// and, on a learner, promotes it. It returns when ctx is cancelled or etcd
// fails, after etcd has stopped.
func (s *Service) Run(ctx context.Context) (err error) {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("consensus: Run is already running for this service")
	}
	defer s.running.Store(false)
	logger := supervisor.Logger(ctx)
	s.status.Set(&Status{State: StateStarting, Name: s.cfg.Name})
	defer func() {
		s.status.Set(&Status{State: StateStopped, Name: s.cfg.Name, Err: err})
	}()

	id, err := prepare(&s.cfg, logger)
	if err != nil {
		return err
	}
	if id.Removed {
		return fmt.Errorf("%w (recorded in %s)", ErrRemoved, layout(s.cfg.DataDir).identityFile())
	}
	if err := checkDatabase(ctx, layout(s.cfg.DataDir).dbFile()); err != nil {
		return err
	}
	id.InitialCluster = currentInitialCluster(ctx, layout(s.cfg.DataDir), id, logger)
	var removed, closed atomic.Bool
	initialCheck := initialCheckWanted(ctx, layout(s.cfg.DataDir), id, logger)
	ecfg, err := s.etcdConfig(id, logger, &removed, &closed, initialCheck)
	if err != nil {
		return err
	}
	e, err := embed.StartEtcd(ecfg)
	if err != nil {
		return fmt.Errorf("starting etcd: %w", err)
	}
	// etcd's peer transport can log from goroutines that outlive Close by
	// a moment; once Run returns, its logger (the supervisor's, which a
	// test may already have torn down) must no longer be written to.
	defer closed.Store(true)
	defer closeEtcd(e)
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		return fmt.Errorf("etcd failed while starting: %w", err)
	case <-e.Server.StopNotify():
		return s.stopped(e, id, &removed)
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := s.checkIDs(e, id); err != nil {
		return err
	}
	if err := os.Chmod(s.cfg.ClientSocket, 0o600); err != nil {
		return fmt.Errorf("restricting client socket: %w", err)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{"unix://" + s.cfg.ClientSocket},
		DialTimeout: clientDialTimeout,
		Logger:      logger.Named("client"),
	})
	if err != nil {
		return fmt.Errorf("connecting to local etcd: %w", err)
	}
	defer cli.Close()
	caPEM, err := os.ReadFile(layout(s.cfg.DataDir).caFile())
	if err != nil {
		return fmt.Errorf("reading CA certificate: %w", err)
	}
	caCert, err := parseCertPEM(caPEM)
	if err != nil {
		return fmt.Errorf("parsing CA certificate: %w", err)
	}
	m := &member{
		cfg:    &s.cfg,
		layout: layout(s.cfg.DataDir),
		etcd:   e,
		cli:    cli,
		caCert: caCert,
		kick:   make(chan struct{}, 1),
	}
	if err := m.finishBootstrap(ctx, logger); err != nil {
		return err
	}
	if id.Recover != nil {
		if err := m.finishRecovery(ctx, id, logger); err != nil {
			return err
		}
	}
	if err := supervisor.Run(ctx, "crl", m.runCRLMirror); err != nil {
		return fmt.Errorf("starting CRL mirror: %w", err)
	}
	if learner, _ := m.isLearner(); learner {
		if err := supervisor.Run(ctx, "promote", m.runPromoter); err != nil {
			return fmt.Errorf("starting promoter: %w", err)
		}
	}
	supervisor.Signal(ctx, supervisor.SignalHealthy)

	ticker := time.NewTicker(statusInterval)
	defer ticker.Stop()
	for {
		st, err := m.status()
		if err != nil {
			return s.stopped(e, id, &removed)
		}
		s.status.Set(st)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-e.Err():
			return fmt.Errorf("etcd failed: %w", err)
		case <-e.Server.StopNotify():
			return s.stopped(e, id, &removed)
		case <-e.Server.LeaderChangedNotify():
		case <-m.kick:
		case <-ticker.C:
		}
	}
}

// stopped explains why etcd stopped on its own. A member that finds itself
// removed records it, so that later starts fail fast instead of talking to
// peers that reject it.
func (s *Service) stopped(e *embed.Etcd, id *identity, removed *atomic.Bool) error {
	if e.Server.Cluster().Member(e.Server.MemberID()) != nil && !removed.Load() {
		return errors.New("etcd server stopped by itself")
	}
	id.Removed = true
	if err := writeIdentity(layout(s.cfg.DataDir), id); err != nil {
		return fmt.Errorf("%w; recording it: %v", ErrRemoved, err)
	}
	return ErrRemoved
}

// checkIDs compares etcd's cluster and member IDs with those recorded on the
// first start, and records them if this is the first start.
func (s *Service) checkIDs(e *embed.Etcd, id *identity) error {
	cluster := e.Server.Cluster().ID().String()
	self := e.Server.MemberID().String()
	if id.ClusterID == "" {
		id.ClusterID, id.MemberID = cluster, self
		return writeIdentity(layout(s.cfg.DataDir), id)
	}
	if id.ClusterID != cluster || id.MemberID != self {
		return fmt.Errorf("%w: etcd data is member %s of cluster %s, identity.json says member %s of cluster %s",
			ErrDataMismatch, self, cluster, id.MemberID, id.ClusterID)
	}
	return nil
}

// etcdConfig translates the member's configuration into etcd's.
// removed is set when etcd reports that it stopped because the member was
// removed (see removalSpotter).
func (s *Service) etcdConfig(id *identity, logger *zap.Logger, removed, closed *atomic.Bool, initialCheck bool) (*embed.Config, error) {
	l := layout(s.cfg.DataDir)
	ec := embed.NewConfig()
	ec.Name = s.cfg.Name
	ec.Dir = l.etcdDir()
	ec.InitialCluster = id.InitialCluster
	ec.ClusterState = id.InitialClusterState
	if id.InitialClusterToken != "" {
		ec.InitialClusterToken = id.InitialClusterToken
	}
	// Prepared by PrepareRecovery: keep the data, drop every other member.
	// (A restore's membership holds this member alone already.)
	ec.ForceNewCluster = id.Recover != nil && id.Recover.From == RecoveryFromMemberData

	advertise, err := url.Parse(id.PeerURL)
	if err != nil {
		return nil, fmt.Errorf("parsing peer URL: %w", err)
	}
	listen, err := url.Parse("https://" + s.cfg.ListenAddress)
	if err != nil {
		return nil, fmt.Errorf("parsing listen URL: %w", err)
	}
	ec.ListenPeerUrls = []url.URL{*listen}
	ec.AdvertisePeerUrls = []url.URL{*advertise}
	client := url.URL{Scheme: "unix", Path: s.cfg.ClientSocket}
	ec.ListenClientUrls = []url.URL{client}
	ec.AdvertiseClientUrls = []url.URL{client}
	ec.ListenClientHttpUrls = nil
	ec.EnableGRPCGateway = false

	ec.PeerTLSInfo = transport.TLSInfo{
		CertFile:       l.peerCertFile(),
		KeyFile:        l.peerKeyFile(),
		TrustedCAFile:  l.caFile(),
		ClientCertAuth: true,
		CRLFile:        l.crlFile(),
		// Connections between loopback addresses come from 127.0.0.1, and
		// behind NAT from anywhere: the source address says nothing. A peer
		// is identified by its certificate, checked against the CA and the
		// CRL.
		SkipClientSANVerify: true,
		// Members are all Polis nodes of the same release line: nothing
		// needs an older protocol, and 1.3 alone leaves no cipher suite
		// or renegotiation to choose.
		MinVersion: tls.VersionTLS13,
		Logger:     logger.Named("peer-tls"),
	}
	// The same floor for etcd's own check of the configuration.
	ec.TlsMinVersion = string(tlsutil.TLSVersion13)
	// Compare this member's data with the others' before serving (a
	// member whose data diverged refuses to start) unless its peers do
	// not serve yet (initialcheck.go), and let the leader compare the
	// members' hashes after every compaction.
	if err := ec.ServerFeatureGate.(featuregate.MutableFeatureGate).SetFromMap(map[string]bool{
		string(features.InitialCorruptCheck): initialCheck,
		string(features.CompactHashCheck):    true,
	}); err != nil {
		return nil, fmt.Errorf("enabling etcd's corruption checks: %w", err)
	}

	ec.MaxLearners = MaxLearners
	ec.TickMs = uint(s.cfg.HeartbeatInterval / time.Millisecond)
	ec.ElectionMs = uint(s.cfg.ElectionTimeout / time.Millisecond)
	// Keep an hour of history for watchers that reconnect; anything older
	// is re-read, never replayed (event/etcd relies on that).
	ec.AutoCompactionMode = embed.CompactorModePeriodic
	ec.AutoCompactionRetention = "1h"

	ec.Logger = "zap"
	etcdLogger := logger.Named("etcd").WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return &removalSpotter{Core: c, seen: removed, closed: closed}
	}))
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(etcdLogger)
	return ec, nil
}

// status reads the member's current role from etcd's server. It fails once
// the member is no longer part of the cluster.
func (m *member) status() (*Status, error) {
	srv := m.etcd.Server
	learner, err := m.isLearner()
	if err != nil {
		return nil, err
	}
	self := srv.MemberID()
	lead := srv.Leader()
	return &Status{
		State:     StateRunning,
		Name:      m.cfg.Name,
		ClusterID: uint64(srv.Cluster().ID()),
		MemberID:  uint64(self),
		Learner:   learner,
		Leader:    lead == self,
		LeaderID:  uint64(lead),
		m:         m,
	}, nil
}

// isLearner asks etcd's membership, which (unlike EtcdServer.IsLearner)
// does not panic once the member has been removed.
func (m *member) isLearner() (bool, error) {
	self := m.etcd.Server.Cluster().Member(m.etcd.Server.MemberID())
	if self == nil {
		return false, ErrRemoved
	}
	return self.IsLearner, nil
}

// kickStatus makes Run publish a fresh status without waiting for its
// ticker.
func (m *member) kickStatus() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// finishBootstrap moves the CA key of a freshly bootstrapped cluster from
// disk into etcd, together with the CA certificate, the initial CRL and this
// member's peer certificate, then deletes the key file. It runs on every
// start while the key file exists, so a crash between the two steps is
// repaired on the next start.
func (m *member) finishBootstrap(ctx context.Context, logger *zap.Logger) error {
	keyData, err := m.layout.caKey().Read()
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading CA key: %w", err)
	}
	key, err := parseKeyPEM(keyData)
	if err != nil {
		return fmt.Errorf("parsing CA key: %w", err)
	}
	if !key.Public().(ed25519.PublicKey).Equal(m.caCert.PublicKey) {
		return errors.New("CA key on disk does not match the CA certificate")
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("marshalling CA key: %w", err)
	}
	crl, err := os.ReadFile(m.layout.crlFile())
	if err != nil {
		return fmt.Errorf("reading CRL: %w", err)
	}
	peerPEM, err := os.ReadFile(m.layout.peerCertFile())
	if err != nil {
		return fmt.Errorf("reading peer certificate: %w", err)
	}
	peerCert, err := parseCertPEM(peerPEM)
	if err != nil {
		return fmt.Errorf("parsing peer certificate: %w", err)
	}
	resp, err := m.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(caCertKey), "=", 0)).
		Then(
			clientv3.OpPut(caKeyKey, string(keyDER)),
			clientv3.OpPut(caCertKey, string(m.caCert.Raw)),
			clientv3.OpPut(crlKey, string(crl)),
			clientv3.OpPut(peerPrefix+m.cfg.Name, string(peerCert.Raw)),
		).
		Else(clientv3.OpGet(caCertKey)).
		Commit()
	if err != nil {
		return fmt.Errorf("storing CA in etcd: %w", err)
	}
	if !resp.Succeeded {
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) != 1 || !bytes.Equal(kvs[0].Value, m.caCert.Raw) {
			return fmt.Errorf("%w: etcd holds another CA than this member's", ErrDataMismatch)
		}
	}
	if err := m.layout.caKey().Remove(); err != nil {
		return fmt.Errorf("removing CA key file: %w", err)
	}
	logger.Info("bootstrap finished: CA stored in etcd", zap.String("cluster-id", m.etcd.Server.Cluster().ID().String()))
	return nil
}

// etcdRemovedMessage is what etcd logs, and only logs, when its server
// stops on a critical error, which rafthttp raises only when peers answer
// that this member was removed ("the member has been permanently removed
// from the cluster"). A removed member learns it either by applying its
// own removal (then it is gone from its membership view) or from such an
// answer (then it is not, because it never applied the change).
const etcdRemovedMessage = "data-dir used by this member must be removed"

// removalSpotter is a zap core around etcd's logger that notices
// etcdRemovedMessage. embed exposes the server's critical errors in no other
// way.
type removalSpotter struct {
	zapcore.Core
	seen *atomic.Bool
	// closed is set once Run has returned: later entries are dropped.
	closed *atomic.Bool
}

// Enabled lets warnings through to Check even if the wrapped core would
// drop them, so that a quiet logger does not blind the spotter.
func (r *removalSpotter) Enabled(l zapcore.Level) bool {
	return l >= zapcore.WarnLevel || r.Core.Enabled(l)
}

func (r *removalSpotter) With(fields []zapcore.Field) zapcore.Core {
	return &removalSpotter{Core: r.Core.With(fields), seen: r.seen, closed: r.closed}
}

func (r *removalSpotter) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if e.Message == etcdRemovedMessage {
		r.seen.Store(true)
	}
	if r.closed.Load() {
		return ce
	}
	return r.Core.Check(e, ce)
}

// memberIDString formats an etcd member ID the way etcd logs it.
func memberIDString(id uint64) string { return types.ID(id).String() }
