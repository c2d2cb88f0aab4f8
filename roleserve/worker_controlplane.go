package roleserve

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/timestamppb"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/consensus"
	"github.com/polis-os/polis/curator"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/supervisor"
)

// Default ports of a node's control plane. Every node has its own IP
// address (in development, its own loopback address), so fixed ports do not
// collide.
const (
	DefaultConsensusPort = 7834
	DefaultCuratorPort   = 7835
)

// ControlPlaneConfig is what the controlplane worker needs to know about the
// node, fixed for the node's lifetime.
type ControlPlaneConfig struct {
	// NodeKey is the node's private key: the consensus member's peer key
	// and the curator's serving key.
	NodeKey ed25519.PrivateKey
	// Address is the node's IP address; consensus and curator listen on it.
	Address netip.Addr
	// ConsensusPort and CuratorPort default to DefaultConsensusPort and
	// DefaultCuratorPort.
	ConsensusPort, CuratorPort uint16
	// EtcdDir is the consensus member's data directory.
	EtcdDir string
	// SnapshotDir is where the member keeps its periodic snapshots;
	// "consensus-snapshots" beside EtcdDir if empty.
	SnapshotDir string
	// Bootstrap is set when this node bootstraps a new cluster: the worker
	// then runs the control plane without waiting for roles (there is no
	// curator to ask yet) and initialises the curator's state.
	Bootstrap *curator.BootstrapParams
	// NodeStatus is the node's status as first recorded at bootstrap.
	NodeStatus *cpb.NodeStatus
	// LeaseTTL and HeartbeatInterval are passed to the curator (tests
	// shorten them); zero means the curator's defaults.
	LeaseTTL, HeartbeatInterval time.Duration
	// RaftHeartbeat and ElectionTimeout are the consensus member's raft
	// timings (consensus.Config); zero means etcd's defaults.
	RaftHeartbeat, ElectionTimeout time.Duration
	// BeforeConsensus, if set, is called before each start of the
	// consensus member, which starts only if it succeeds; release is
	// called once the member and the curator have stopped. The node
	// agent unbinds its data disk from the cluster there: a member's
	// disk must unlock at a cold start, before any curator runs.
	BeforeConsensus func(ctx context.Context) (release func(), err error)
}

func (c *ControlPlaneConfig) consensusPort() uint16 {
	if c.ConsensusPort == 0 {
		return DefaultConsensusPort
	}
	return c.ConsensusPort
}

func (c *ControlPlaneConfig) snapshotDir() string {
	if c.SnapshotDir == "" {
		return filepath.Join(filepath.Dir(c.EtcdDir), "consensus-snapshots")
	}
	return c.SnapshotDir
}

func (c *ControlPlaneConfig) curatorPort() uint16 {
	if c.CuratorPort == 0 {
		return DefaultCuratorPort
	}
	return c.CuratorPort
}

// workerControlPlane runs this node's consensus member and curator while the
// node must: when it bootstraps the cluster, or while it holds the
// ConsensusMember role (joining etcd with the data the curator put in the
// role). When the role goes, it stops them.
type workerControlPlane struct {
	*Worker
	cfg ControlPlaneConfig
	// bootstrapped is set once this worker has initialised the cluster:
	// later runs (after a failure, or after the role was taken away) follow
	// the roles like on any other node.
	bootstrapped bool
	// discardData is set when the local consensus data belongs to a
	// membership that has ended (the member was removed from the
	// cluster): such data can never serve again, and the next start with
	// fresh join data clears it and joins anew.
	discardData  bool
	roles        event.ValueWatch[*cpb.Roles]          // reads
	local        event.Value[*LocalControlPlane]       // writes
	localCurator event.Value[*cpb.CuratorEndpoint]     // writes
	snapshots    event.Value[[]*cpb.ConsensusSnapshot] // writes
}

func newWorkerControlPlane(g *Graph, v *Values, cfg ControlPlaneConfig) *workerControlPlane {
	h := g.Worker("controlplane")
	h.Produces(consensus.StatusName)
	h.Produces(curator.StatusName)
	return &workerControlPlane{
		Worker:       h,
		cfg:          cfg,
		roles:        Reads[*cpb.Roles](h, &v.LocalRoles),
		local:        Writes[*LocalControlPlane](h, &v.LocalControlPlane),
		localCurator: Writes[*cpb.CuratorEndpoint](h, &v.LocalCurator),
		snapshots:    Writes[[]*cpb.ConsensusSnapshot](h, &v.ConsensusSnapshots),
	}
}

// errRoleRemoved ends a run of the worker whose node lost ConsensusMember:
// the supervisor then stops the control plane (the run's children) and
// starts the worker afresh, which waits for the role to come back.
var errRoleRemoved = errors.New("ConsensusMember role removed: stopping the control plane")

func consensusMember(r *cpb.Roles) bool { return r != nil && r.ConsensusMember != nil }

// removed holds for a consensus member that stopped because it was removed
// from the cluster.
func removed(s *consensus.Status) bool {
	return s.State == consensus.StateStopped && errors.Is(s.Err, consensus.ErrRemoved)
}

func (w *workerControlPlane) run(ctx context.Context) error {
	logger := supervisor.Logger(ctx)
	w.local.Set(nil)
	w.localCurator.Set(nil)
	w.snapshots.Set(nil)
	in := w.Inputs()
	defer in.Close()

	bootstrap := w.cfg.Bootstrap != nil && !w.bootstrapped
	var join *consensus.JoinData
	if !bootstrap {
		roles := Input(in, w.roles, consensusMember)
		why, err := in.Wait(ctx)
		if err != nil {
			return err
		}
		logger.Info("starting the control plane", zap.Stringer("because", why))
		join = joinData(roles.Latest().ConsensusMember.JoinData)
	} else {
		logger.Info("starting the control plane to bootstrap a new cluster")
	}
	if w.discardData && join != nil {
		logger.Info("discarding the data of this node's removed consensus member before joining again", zap.String("dir", w.cfg.EtcdDir))
		if err := os.RemoveAll(w.cfg.EtcdDir); err != nil {
			return fmt.Errorf("discarding the removed member's data: %w", err)
		}
		// Its snapshots go too: they hold the cluster's CA keys, which
		// a node that is no member has no business keeping.
		if err := os.RemoveAll(w.cfg.snapshotDir()); err != nil {
			return fmt.Errorf("discarding the removed member's snapshots: %w", err)
		}
		w.discardData = false
	}

	if w.cfg.BeforeConsensus != nil {
		release, err := w.cfg.BeforeConsensus(ctx)
		if err != nil {
			return err
		}
		// Cleanups run once the run's children (the member, the
		// curator) have stopped.
		supervisor.Cleanup(ctx, release)
	}
	nodeID := identity.NodeID(w.cfg.NodeKey.Public().(ed25519.PublicKey))
	cons, err := consensus.New(consensus.Config{
		Name:        nodeID,
		DataDir:     w.cfg.EtcdDir,
		PeerAddress: netip.AddrPortFrom(w.cfg.Address, w.cfg.consensusPort()).String(),
		PeerKey:     w.cfg.NodeKey,
		Bootstrap:   bootstrap,
		Join:        join,

		HeartbeatInterval: w.cfg.RaftHeartbeat,
		ElectionTimeout:   w.cfg.ElectionTimeout,
	})
	if err != nil {
		return fmt.Errorf("consensus: %w", err)
	}
	// The member stops after the curator, whose last act, revoking its
	// election lease, goes through it (memberusers.go).
	var users memberUsers
	if err := supervisor.Run(ctx, "consensus", func(ctx context.Context) error { return cons.Run(users.outlive(ctx)) }); err != nil {
		return err
	}
	consIn := w.Inputs()
	defer consIn.Close()
	consStatus := Input(consIn, cons.Status(), func(s *consensus.Status) bool {
		return consensus.IsVoter(s) || removed(s)
	})
	if _, err := consIn.Wait(ctx); err != nil {
		return fmt.Errorf("waiting for consensus: %w", err)
	}
	st := consStatus.Latest()
	if removed(st) {
		// The data is from a membership that ended while this node was
		// away or before the role came back; the next run, given the
		// role's fresh join data, starts over.
		w.discardData = true
		return fmt.Errorf("the local consensus member had been removed from the cluster: %w", st.Err)
	}
	cli, err := st.ClientFor("curator")
	if err != nil {
		return err
	}
	// Closed once the curator, a child that keeps using it, has stopped
	// too; a defer would close it under the curator's feet.
	supervisor.Cleanup(ctx, func() { cli.Close() })
	if bootstrap {
		// Idempotent: after a crash half-way, it completes what is missing.
		if _, err := curator.Bootstrap(ctx, cli, *w.cfg.Bootstrap, time.Now()); err != nil {
			return err
		}
		w.bootstrapped = true
	}
	// The member's periodic snapshots, as often and as many as the
	// cluster's policy (in the curator's state) says.
	snaps, err := consensus.NewSnapshotter(consensus.SnapshotterConfig{
		Status: cons.Status(),
		Dir:    w.cfg.snapshotDir(),
		Policy: func(ctx context.Context) (consensus.SnapshotPolicy, error) {
			return curator.ConsensusSnapshotPolicy(ctx, cli)
		},
		Publish: func(files []consensus.SnapshotFile) { w.snapshots.Set(snapshotsProto(files)) },
	})
	if err != nil {
		return err
	}
	if err := supervisor.Run(ctx, "snapshots", snaps.Run); err != nil {
		return err
	}
	cur, err := curator.New(curator.Config{
		Client:            cli,
		Consensus:         cons.Status(),
		NodeKey:           w.cfg.NodeKey,
		ListenAddress:     netip.AddrPortFrom(w.cfg.Address, w.cfg.curatorPort()).String(),
		LeaseTTL:          w.cfg.LeaseTTL,
		HeartbeatInterval: w.cfg.HeartbeatInterval,
	})
	if err != nil {
		return fmt.Errorf("curator: %w", err)
	}
	if err := supervisor.Run(ctx, "curator", users.hold(cur.Run)); err != nil {
		return err
	}
	// "The local curator serves" is true only while its Status says so.
	if err := supervisor.Run(ctx, "localcurator", func(ctx context.Context) error { return w.publishCurator(ctx, cur) }); err != nil {
		return err
	}
	w.local.Set(&LocalControlPlane{Consensus: cons, Curator: cur})
	// Withdrawn once the run and its children (consensus, curator) have
	// stopped, whatever ended the run: readers never see a stopped
	// control plane as running.
	supervisor.Cleanup(ctx, func() {
		w.localCurator.Set(nil)
		w.local.Set(nil)
		w.snapshots.Set(nil)
	})
	supervisor.Signal(ctx, supervisor.SignalHealthy)

	// Run until the role is taken away. A bootstrapping node waits for its
	// roles like any other once they are known: the first node is given
	// ConsensusMember, and the curator refuses to take it from the node it
	// runs on while it leads.
	watch := w.Inputs()
	defer watch.Close()
	roles := Input(watch, w.roles, func(r *cpb.Roles) bool { return r != nil && !consensusMember(r) })
	why, err := watch.Wait(ctx)
	if err != nil {
		return err
	}
	logger.Info("stopping the control plane", zap.Stringer("because", why), zap.String("roles", roles.Latest().String()))
	w.local.Set(nil)
	// The curator removes the member before it takes the role away: the
	// local data is from a membership that has ended.
	w.discardData = true
	return errRoleRemoved
}

// publishCurator publishes where the local curator serves while it serves:
// its Status is unset until it first serves and nil once it stopped (a
// restart by the supervisor sets it again).
func (w *workerControlPlane) publishCurator(ctx context.Context, cur *curator.Service) error {
	in := w.Inputs()
	defer in.Close()
	status := Input(in, cur.Status(), nil)
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	for {
		why, err := in.Wait(ctx)
		if err != nil {
			return err
		}
		ep := status.Latest().Endpoint()
		supervisor.Logger(ctx).Info("local curator", zap.Stringer("because", why), zap.Bool("serving", ep != nil))
		w.localCurator.Set(ep)
	}
}

// joinData converts the curator's join data into the consensus package's.
func joinData(j *cpb.ConsensusJoinData) *consensus.JoinData {
	if j == nil {
		return nil
	}
	jd := &consensus.JoinData{CACertificate: j.CaCertificate, PeerCertificate: j.PeerCertificate, CRL: j.Crl}
	for _, p := range j.Peers {
		jd.Peers = append(jd.Peers, consensus.Peer{Name: p.Name, Address: p.Address})
	}
	return jd
}

// snapshotsProto is how the node reports its member's snapshots: never
// more than the curator accepts. Not nil: nil is the value of a node that
// runs no member.
func snapshotsProto(files []consensus.SnapshotFile) []*cpb.ConsensusSnapshot {
	res := []*cpb.ConsensusSnapshot{}
	for _, f := range files[:min(len(files), consensus.MaxSnapshotKeep)] {
		res = append(res, &cpb.ConsensusSnapshot{TakenAt: timestamppb.New(f.Time), Revision: f.Revision, Size: f.Size})
	}
	return res
}
