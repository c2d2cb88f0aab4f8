package node

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cpb "github.com/polis-os/polis/api/curator/v1"
	nodev1 "github.com/polis-os/polis/api/node/v1"
	"github.com/polis-os/polis/curator"
	"github.com/polis-os/polis/curator/client"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/event/memory"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/localstorage"
	"github.com/polis-os/polis/node/diskseal"
	"github.com/polis-os/polis/node/pid1"
	"github.com/polis-os/polis/roleserve"
	"github.com/polis-os/polis/supervisor"
)

// The data disk's cluster part (node/diskseal, docs/threat-model.md):
// the half of the disk's key-encryption key the curator keeps for this
// node (CuratorService.GetClusterPart). Two things here:
//
//   - FetchClusterPart asks for it at boot, before the data disk is
//     unlocked, from what the ESP holds: the sealed configuration (the
//     node key, the cluster CA) and the saved cluster directory. PID 1
//     calls it (pid1.BootOptions) for a disk bound to its cluster.
//   - dataBinding binds the disk to its cluster once the node is an UP
//     member without ConsensusMember, and unbinds it before the node's
//     consensus member starts (roleserve's ControlPlaneConfig
//     .BeforeConsensus): a consensus member's disk must unlock at a cold
//     start, before any curator runs.

// DataDisk is the machine's encrypted data disk, as the agent binds it to
// its cluster (pid1.DataDisk).
type DataDisk interface {
	// ClusterBound says whether the disk needs the cluster part.
	ClusterBound() bool
	// Bind makes the disk need the cluster part from its next boot on.
	Bind(clusterPart []byte) error
	// Unbind makes the disk unlock with the local part alone.
	Unbind() error
}

// FetchClusterPart asks the cluster's curators for this node's cluster
// part, proving the node key, with the storage under storageRoot of which
// only the ESP is mounted. A refusal (the node was decommissioned or
// deleted) wraps pid1.ErrClusterPartRefused.
func FetchClusterPart(ctx context.Context, storageRoot string, sealer localstorage.Sealer) ([]byte, error) {
	root, err := localstorage.New(storageRoot)
	if err != nil {
		return nil, err
	}
	s, err := readSealedConfiguration(root, sealer)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("the node has no sealed configuration (%s), which holds the key it proves itself with: the ESP was replaced or wiped. Restore the ESP; without the node key, the cluster hands out no cluster part", root.ESP.SealedConfiguration.Path)
	}
	if err != nil {
		return nil, err
	}
	curators := savedCurators(root)
	if len(curators) == 0 {
		return nil, fmt.Errorf("the ESP names no curator to ask (%s and %s hold none): restore the ESP", root.ESP.ClusterDirectory.Path, root.ESP.NodeParameters.Path)
	}
	verifier, err := identity.NewVerifier(s.ca)
	if err != nil {
		return nil, err
	}
	tlsCfg, err := identity.KeyHolderClientConfig(verifier, s.key)
	if err != nil {
		return nil, err
	}
	conn, err := client.New(client.Config{Endpoints: curators, TLS: tlsCfg, FailFast: true})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	id := identity.NodeID(s.key.Public().(ed25519.PublicKey))
	part, err := getClusterPart(ctx, conn, id)
	if client.IsUnreachable(err) {
		return nil, fmt.Errorf("no curator answers (asked %s): %w", endpointList(curators), err)
	}
	return part, err
}

// getClusterPart calls GetClusterPart and checks the answer; a refusal
// wraps pid1.ErrClusterPartRefused and says why.
func getClusterPart(ctx context.Context, conn grpc.ClientConnInterface, id string) ([]byte, error) {
	resp, err := cpb.NewCuratorServiceClient(conn).GetClusterPart(ctx, &cpb.GetClusterPartRequest{})
	switch {
	case curator.IsNodeDecommissioned(err):
		return nil, fmt.Errorf("%w: node %s was decommissioned (and perhaps deleted since): %v", pid1.ErrClusterPartRefused, id, status.Convert(err).Message())
	case curator.IsNodeNotFound(err):
		return nil, fmt.Errorf("%w: node %s is not part of the cluster (deleted): %v", pid1.ErrClusterPartRefused, id, status.Convert(err).Message())
	case status.Code(err) == codes.FailedPrecondition:
		return nil, fmt.Errorf("%w: %v", pid1.ErrClusterPartRefused, status.Convert(err).Message())
	case err != nil:
		return nil, fmt.Errorf("asking for the cluster part: %w", err)
	}
	if n := len(resp.GetClusterPart()); n != diskseal.PartSize {
		return nil, fmt.Errorf("the curator's cluster part is %d bytes, want %d", n, diskseal.PartSize)
	}
	return resp.GetClusterPart(), nil
}

// savedCurators are the curators the ESP names: the saved cluster
// directory's, or the parameters'. Nothing is rewritten here: the agent
// repairs a damaged file once it runs.
func savedCurators(root *localstorage.Root) []*cpb.CuratorEndpoint {
	var dir cpb.ClusterDirectory
	if err := root.ESP.ClusterDirectory.ReadProto(&dir); err == nil && len(dir.GetCurators()) > 0 {
		return dir.Curators
	}
	var p nodev1.NodeParameters
	if err := root.ESP.NodeParameters.ReadProto(&p); err == nil {
		return p.GetClusterRegister().GetClusterDirectory().GetCurators()
	}
	return nil
}

func endpointList(eps []*cpb.CuratorEndpoint) string {
	s := ""
	for i, ep := range eps {
		if i > 0 {
			s += ", "
		}
		s += ep.HostPort()
	}
	return s
}

// dataBinding keeps the data disk bound to its cluster while the node is
// an UP member that runs no consensus member, and unbound while it may
// run one. Binding follows the roles the curator gives (rolefetch's
// localRoles): without ConsensusMember, the node asks for its cluster
// part and binds; with it, it unbinds. The control plane's own hook
// (beforeConsensus) unbinds before the consensus member starts and holds
// binding off until the member has stopped, so a member never runs on a
// bound disk, whatever the order in which the two see a role change. The
// curator removes a member from etcd before it takes the role away, so
// binding after the role is gone never binds a voter.
//
//	reads:  localRoles, membership (to call the curator)
//	writes: dataClusterBound (for the node's status)
type dataBinding struct {
	disk       DataDisk
	roles      event.ValueWatch[*cpb.Roles]
	membership event.ValueWatch[*roleserve.ClusterMembership]
	bound      event.Value[bool]

	mu sync.Mutex
	// members counts the consensus members started and not yet stopped,
	// written with mu held.
	members memory.Value[int]
}

func newDataBinding(disk DataDisk, v *roleserve.Values) *dataBinding {
	b := &dataBinding{disk: disk, roles: &v.LocalRoles, membership: &v.Membership, bound: &v.DataClusterBound}
	b.members.Set(0)
	return b
}

// running is how many consensus members run; with mu held.
func (b *dataBinding) running() int {
	n, _ := event.Get(context.Background(), &b.members)
	return n
}

// bindRPCTimeout bounds the call for the cluster part.
const bindRPCTimeout = 15 * time.Second

// beforeConsensus is roleserve.ControlPlaneConfig.BeforeConsensus.
func (b *dataBinding) beforeConsensus(ctx context.Context) (func(), error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.disk.Unbind(); err != nil {
		return nil, fmt.Errorf("unbinding the data disk from the cluster before the consensus member starts (a member's disk must unlock at a cold start): %w", err)
	}
	n := b.running()
	if n == 0 {
		supervisor.Logger(ctx).Info("the data disk is not bound to the cluster while a consensus member runs on it")
	}
	b.members.Set(n + 1)
	b.bound.Set(false)
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.members.Set(b.running() - 1)
	}, nil
}

func (b *dataBinding) run(ctx context.Context) error {
	b.bound.Set(b.disk.ClusterBound())
	rw := b.roles.Watch()
	defer rw.Close()
	known := event.Filter(func(r *cpb.Roles) bool { return r != nil })
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	roles, err := rw.Get(ctx, known)
	for err == nil {
		var busy bool
		if busy, err = b.follow(ctx, roles); err != nil {
			break
		}
		if busy {
			// A consensus member is still stopping (its role is gone):
			// bind once it has, by the roles as they are then.
			if _, err = event.Get(ctx, &b.members, event.Filter(func(n int) bool { return n == 0 })); err == nil {
				roles, err = event.Get(ctx, b.roles, known)
			}
			continue
		}
		roles, err = rw.Get(ctx, known)
	}
	return err
}

// follow binds or unbinds the disk as roles say; busy says it should be
// bound but a consensus member still runs.
func (b *dataBinding) follow(ctx context.Context, roles *cpb.Roles) (busy bool, err error) {
	logger := supervisor.Logger(ctx)
	if roles.ConsensusMember != nil {
		return false, b.unbind()
	}
	if b.disk.ClusterBound() {
		return false, nil
	}
	m, err := event.Get(ctx, b.membership, event.Filter(func(m *roleserve.ClusterMembership) bool { return m != nil && m.Curator != nil }))
	if err != nil {
		return false, err
	}
	cctx, cancel := context.WithTimeout(ctx, bindRPCTimeout)
	part, err := getClusterPart(cctx, m.Curator, m.Credentials.NodeID)
	cancel()
	if errors.Is(err, pid1.ErrClusterPartRefused) {
		// Decommissioned or deleted: no later call is answered
		// otherwise, and the node stops anyway.
		logger.Warn("the cluster refuses this node its cluster part: the data disk stays unbound", zap.Error(err))
		<-ctx.Done()
		return false, ctx.Err()
	}
	if err != nil {
		return false, err
	}
	defer clear(part)
	bound, err := b.bind(part)
	if err != nil {
		return false, err
	}
	if bound {
		logger.Info("bound the data disk to the cluster: from the next boot on, it unlocks only once a curator hands this node its cluster part")
	}
	return !bound, nil
}

// bind binds the disk unless a consensus member runs; it says whether it
// did.
func (b *dataBinding) bind(part []byte) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.running() > 0 {
		return false, nil
	}
	if err := b.disk.Bind(part); err != nil {
		return false, fmt.Errorf("binding the data disk to the cluster: %w", err)
	}
	b.bound.Set(true)
	return true, nil
}

func (b *dataBinding) unbind() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.disk.Unbind(); err != nil {
		return fmt.Errorf("unbinding the data disk from the cluster: %w", err)
	}
	b.bound.Set(false)
	return nil
}
