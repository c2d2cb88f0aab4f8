package curator

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/consensus"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/identity"
)

// ManagementService: the calls operators make.
//
// Every write is a leader-guarded transaction (updateNode, Leadership.Txn)
// that re-checks its preconditions against the record it replaces, so a
// refused request changes nothing and two concurrent requests cannot undo
// each other. Role changes that touch etcd's membership cannot be one
// transaction with the record; how they stay safe is at UpdateNodeRoles.

// listNodesBatch is how many records one ListNodesResponse carries: large
// enough that a big cluster lists in few messages, small enough that a
// message stays far below gRPC's 4 MiB default limit (a record is well
// under a kilobyte without join data).
const listNodesBatch = 100

func (r *rpcServer) GetClusterInfo(ctx context.Context, _ *cpb.GetClusterInfoRequest) (*cpb.GetClusterInfoResponse, error) {
	dir, err := r.clusterDirectory(ctx)
	if err != nil {
		return nil, err
	}
	rec, err := r.s.lastRecovery(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "%v", err)
	}
	policy, err := SnapshotPolicy(ctx, r.s.cfg.Client)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "%v", err)
	}
	pods, err := readPodNetwork(ctx, r.s.cfg.Client)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "%v", err)
	}
	return &cpb.GetClusterInfoResponse{ClusterDirectory: dir, LastRecovery: rec, ConsensusSnapshots: policy, PodNetwork: pods}, nil
}

// ListNodes serves from the node cache, the same view that authorises
// callers, at the snapshot the call was fenced on (so it holds every
// write acknowledged before the call), adding this curator's judgement of
// each UP node's health, which every curator makes alike (health.go).
func (r *rpcServer) ListNodes(req *cpb.ListNodesRequest, stream grpc.ServerStreamingServer[cpb.ListNodesResponse]) error {
	ctx := stream.Context()
	snap := fencedFrom(ctx)
	if snap == nil {
		return status.Error(codes.Internal, "ListNodes was not fenced on the node records")
	}
	if err := r.s.heartbeats.waitLoaded(ctx); err != nil {
		return status.Errorf(codes.Unavailable, "the curator has not read the heartbeat records yet: %v", err)
	}
	now := r.s.cfg.Now()
	var batch []*cpb.Node
	size := 0 // of batch's records, encoded
	for _, id := range slices.Sorted(maps.Keys(snap.nodes)) {
		n := snap.nodes[id]
		if !nodeMatches(n, req) {
			continue
		}
		// Records in a snapshot are shared: copy before filling in.
		out := withoutJoinData(n)
		if n.State == cpb.NodeState_NODE_STATE_UP {
			h, ago := r.s.heartbeats.health(id, now)
			out.Health = h
			if h == cpb.NodeHealth_NODE_HEALTH_HEALTHY || h == cpb.NodeHealth_NODE_HEALTH_HEARTBEAT_TIMEOUT {
				out.TimeSinceHeartbeat = durationpb.New(ago)
			}
		}
		s := proto.Size(out)
		if len(batch) > 0 && size+s > maxBatchBytes {
			if err := stream.Send(&cpb.ListNodesResponse{Nodes: batch}); err != nil {
				return err
			}
			batch, size = nil, 0
		}
		batch = append(batch, out)
		size += s
		if len(batch) == listNodesBatch {
			if err := stream.Send(&cpb.ListNodesResponse{Nodes: batch}); err != nil {
				return err
			}
			batch, size = nil, 0
		}
	}
	if len(batch) > 0 {
		return stream.Send(&cpb.ListNodesResponse{Nodes: batch})
	}
	return nil
}

// nodeMatches applies a ListNodesRequest's conditions, all of which must
// hold; an empty condition matches every node.
func nodeMatches(n *cpb.Node, req *cpb.ListNodesRequest) bool {
	if len(req.NodeIds) > 0 && !slices.Contains(req.NodeIds, n.Id) {
		return false
	}
	if len(req.States) > 0 && !slices.Contains(req.States, n.State) {
		return false
	}
	for k, v := range req.Labels {
		if got, ok := n.Labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// withoutJoinData copies n without its consensus join data, which only
// the node itself is given.
func withoutJoinData(n *cpb.Node) *cpb.Node {
	out := proto.Clone(n).(*cpb.Node)
	if cm := out.GetRoles().GetConsensusMember(); cm != nil {
		cm.JoinData = nil
	}
	return out
}

func (r *rpcServer) GetRegisterTicket(ctx context.Context, _ *cpb.GetRegisterTicketRequest) (*cpb.GetRegisterTicketResponse, error) {
	resp, err := r.s.cfg.Client.Get(ctx, ticketKey)
	if err != nil {
		return nil, leaderWriteError(fmt.Errorf("reading the register ticket: %w", err))
	}
	if len(resp.Kvs) != 1 || len(resp.Kvs[0].Value) == 0 {
		return nil, status.Error(codes.Internal, "the cluster state holds no register ticket")
	}
	dir, err := r.clusterDirectory(ctx)
	if err != nil {
		return nil, err
	}
	return &cpb.GetRegisterTicketResponse{RegisterTicket: resp.Kvs[0].Value, ClusterDirectory: dir}, nil
}

func (r *rpcServer) ApproveNode(ctx context.Context, req *cpb.ApproveNodeRequest) (*cpb.ApproveNodeResponse, error) {
	if err := checkNodeIDArg(req.NodeId); err != nil {
		return nil, err
	}
	_, err := r.changeNode(ctx, req.NodeId, func(n *cpb.Node) (*cpb.Node, error) {
		switch {
		case n == nil:
			return nil, nodeNotFound(req.NodeId)
		case n.State == cpb.NodeState_NODE_STATE_NEW:
			n.State = cpb.NodeState_NODE_STATE_STANDBY
			return n, nil
		case n.State == cpb.NodeState_NODE_STATE_STANDBY || n.State == cpb.NodeState_NODE_STATE_UP:
			return n, nil // approved already: unchanged, nothing written
		default:
			return nil, status.Errorf(codes.FailedPrecondition, "node %s is %s: a decommissioned node can never be approved again", n.Id, n.State)
		}
	})
	if err != nil {
		return nil, err
	}
	return &cpb.ApproveNodeResponse{}, nil
}

// UpdateNodeRoles changes roles in the record and, for ConsensusMember,
// in etcd's membership, which no transaction spans. The order makes every
// crash recoverable by sending the same request again:
//
//   - Giving ConsensusMember adds the learner first and records the role
//     with its join data after. A crash in between leaves a learner that
//     never started (nobody got its join data); the retry finds it, removes
//     it and adds it afresh, since the join data of the first add are lost.
//   - Taking ConsensusMember away removes the member (and revokes its peer
//     certificate) first and updates the record after, so that no node ever
//     runs a member the record no longer shows. The retry finds no member
//     (consensus.ErrNoMember) and only updates the record.
//
// Membership changes are serialised per leader term (leaderState.membership)
// so that two requests cannot interleave their checks and changes. What
// would refuse the record's change is checked before the membership
// changes (planRoles, and a pod range left for a node given a Kubernetes
// role: needsPodRange), so that a refused request leaves the membership
// as it was. Every change that gives a pod range holds the same lock
// (updateRolesConfirmed, the per-term sweep), so no range can be taken
// between that check and the write that gives it.
//
// It is confirmedByWrite: a change of the other roles, which is the record
// alone, is one transaction that also confirms the leadership and the
// owner's standing, planned from the node cache (changeNodeConfirmed); a
// change of ConsensusMember confirms both first, since it changes etcd's
// membership before the record.
func (r *rpcServer) UpdateNodeRoles(ctx context.Context, req *cpb.UpdateNodeRolesRequest) (*cpb.UpdateNodeRolesResponse, error) {
	if err := checkNodeIDArg(req.NodeId); err != nil {
		return nil, err
	}
	if req.ConsensusMember == nil {
		return r.updateRolesConfirmed(ctx, req)
	}
	if d := deferredFrom(ctx); d != nil {
		if err := d.confirm(ctx); err != nil {
			return nil, err
		}
	}
	l := leaderFrom(ctx)
	l.membership.Lock()
	defer l.membership.Unlock()

	cur, _, err := getNode(ctx, r.s.cfg.Client, req.NodeId)
	if err != nil {
		return nil, leaderWriteError(err)
	}
	roles, err := planRoles(cur, req)
	if err != nil {
		return nil, err
	}
	// withRoles refuses a new worker or controller when no pod range is
	// left; that refusal must come before the membership change below,
	// which the record's transaction cannot undo.
	if err := checkPodRangeLeft(ctx, r.s.cfg.Client, cur, roles); err != nil {
		if _, ok := status.FromError(err); !ok {
			err = leaderWriteError(err)
		}
		return nil, err
	}
	var joinData *cpb.ConsensusJoinData
	switch {
	case req.ConsensusMember == nil:
	case *req.ConsensusMember && cur.GetRoles().GetConsensusMember() == nil:
		if joinData, err = r.addConsensusMember(ctx, cur); err != nil {
			return nil, err
		}
	case !*req.ConsensusMember:
		// Even when the record shows no role: a retry after a crash, or a
		// member left behind, is removed all the same.
		if err := r.removeConsensusMember(ctx, req.NodeId); err != nil {
			return nil, err
		}
	}
	// refused is the change's own refusal: then, unlike after a failed
	// write, the record is known to be unchanged.
	var refused error
	next, err := r.changeNodeTxn(ctx, req.NodeId, func(n *cpb.Node) (*cpb.Node, []clientv3.Cmp, []clientv3.Op, error) {
		next, cmps, ops, err := r.withRoles(ctx, n, req, joinData)
		refused = err
		return next, cmps, ops, err
	})
	if err != nil {
		if joinData != nil && refused != nil && err == refused {
			// Nobody will ever get the join data: take the learner out
			// again, or it would hold etcd's one learner slot. Where the
			// write's fate is unknown, the learner stays, and a retry
			// cleans it up (see above).
			r.undoAddLearner(ctx, req.NodeId)
		}
		return nil, err
	}
	return &cpb.UpdateNodeRolesResponse{Roles: withoutJoinData(next).Roles}, nil
}

// errPodRangeUnlocked is updateRolesConfirmed's own refusal of a change
// that would give a pod range without l.membership: it then takes the
// lock and plans again. No caller ever sees it.
var errPodRangeUnlocked = errors.New("a pod range is given only under l.membership")

// updateRolesConfirmed is UpdateNodeRoles for a request that leaves
// ConsensusMember as it is: the record alone changes, in one
// confirmedByWrite transaction (changeNodeConfirmed). A change that gives
// the node a pod range is made under l.membership, as every change that
// gives one is, so that it cannot take the last range between a
// ConsensusMember change's check for one (checkPodRangeLeft) and that
// change's write, after etcd's membership changed. The lock is taken up
// front when the request gives a Kubernetes role, which is when a range
// is given; a change that turns out to give one without it (a node
// recorded with a role but no range, which the sweep has not reached) is
// planned again under the lock.
func (r *rpcServer) updateRolesConfirmed(ctx context.Context, req *cpb.UpdateNodeRolesRequest) (*cpb.UpdateNodeRolesResponse, error) {
	l := leaderFrom(ctx)
	locked := req.GetKubernetesWorker() || req.GetKubernetesController()
	if locked {
		l.membership.Lock()
		defer l.membership.Unlock()
	}
	change := func(n *cpb.Node) (*cpb.Node, []clientv3.Cmp, []clientv3.Op, error) {
		had := n.GetNetwork().GetPodRange()
		next, cmps, ops, err := r.withRoles(ctx, n, req, nil)
		if err == nil && !locked && had == "" && next.GetNetwork().GetPodRange() != "" {
			return nil, nil, nil, errPodRangeUnlocked
		}
		return next, cmps, ops, err
	}
	next, err := r.changeNodeConfirmed(ctx, req.NodeId, change)
	if errors.Is(err, errPodRangeUnlocked) {
		l.membership.Lock()
		defer l.membership.Unlock()
		locked = true
		next, err = r.changeNodeConfirmed(ctx, req.NodeId, change)
	}
	if err != nil {
		return nil, err
	}
	return &cpb.UpdateNodeRolesResponse{Roles: withoutJoinData(next).Roles}, nil
}

// withRoles is the change UpdateNodeRoles makes to node n's record: the
// roles req asks for (planRoles), with joinData for a ConsensusMember it
// gives, and a pod range for a node given KubernetesWorker or
// KubernetesController in the same transaction (givePodRange), so no node
// ever holds either without one. An error is the request's refusal.
func (r *rpcServer) withRoles(ctx context.Context, n *cpb.Node, req *cpb.UpdateNodeRolesRequest, joinData *cpb.ConsensusJoinData) (*cpb.Node, []clientv3.Cmp, []clientv3.Op, error) {
	roles, err := planRoles(n, req)
	if err != nil {
		return nil, nil, nil, err
	}
	if roles.ConsensusMember != nil && n.GetRoles().GetConsensusMember() == nil {
		if joinData == nil {
			// Only if the record changed behind the lock's back (an
			// operator editing etcd): refuse rather than guess.
			return nil, nil, nil, status.Errorf(codes.Aborted, "node %s: its roles changed during the request; try again", n.Id)
		}
		roles.ConsensusMember = &cpb.ConsensusMemberRole{JoinData: joinData}
	}
	n.Roles = roles
	cmps, ops, err := givePodRange(ctx, r.s.cfg.Client, n)
	if err != nil {
		if _, ok := status.FromError(err); !ok {
			err = leaderWriteError(err)
		}
		return nil, nil, nil, err
	}
	return n, cmps, ops, nil
}

// planRoles checks a role change against node n's record and returns the
// roles n would hold after it, join data left as they are. The rules:
// only UP nodes hold roles; KubernetesController needs ConsensusMember, in
// the same request or already; taking ConsensusMember away takes
// KubernetesController along unless the request says otherwise, and a
// request that keeps KubernetesController explicitly is refused.
func planRoles(n *cpb.Node, req *cpb.UpdateNodeRolesRequest) (*cpb.Roles, error) {
	if n == nil {
		return nil, nodeNotFound(req.NodeId)
	}
	if n.State != cpb.NodeState_NODE_STATE_UP {
		return nil, status.Errorf(codes.FailedPrecondition, "node %s is %s: only UP nodes hold roles", n.Id, n.State)
	}
	roles := proto.Clone(cmp.Or(n.Roles, &cpb.Roles{})).(*cpb.Roles)
	if req.ConsensusMember != nil {
		if !*req.ConsensusMember {
			roles.ConsensusMember = nil
			if req.KubernetesController == nil {
				roles.KubernetesController = nil
			}
		} else if roles.ConsensusMember == nil {
			roles.ConsensusMember = &cpb.ConsensusMemberRole{}
		}
	}
	if req.KubernetesController != nil {
		if *req.KubernetesController {
			roles.KubernetesController = cmp.Or(roles.KubernetesController, &cpb.KubernetesControllerRole{})
		} else {
			roles.KubernetesController = nil
		}
	}
	if req.KubernetesWorker != nil {
		if *req.KubernetesWorker {
			roles.KubernetesWorker = cmp.Or(roles.KubernetesWorker, &cpb.KubernetesWorkerRole{})
		} else {
			roles.KubernetesWorker = nil
		}
	}
	if roles.KubernetesController != nil && roles.ConsensusMember == nil {
		return nil, status.Errorf(codes.FailedPrecondition, "node %s: KubernetesController needs ConsensusMember, which the node would not hold", n.Id)
	}
	return roles, nil
}

// consensusStatus is the local consensus member, once it can change
// membership (a voter).
func (r *rpcServer) consensusStatus(ctx context.Context) (*consensus.Status, error) {
	st, err := event.Get(ctx, r.s.cfg.Consensus, event.Filter(consensus.IsVoter))
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "waiting for this curator's consensus member to be a running voter: %v", err)
	}
	return st, nil
}

// consensusMemberName is the etcd member name of node id: the node ID
// itself, which identity.NodeID makes in a form consensus.NameRegexp
// accepts ("node-" and hex digits). The check guards against either side
// changing its rules.
func consensusMemberName(id string) (string, error) {
	if !consensus.NameRegexp.MatchString(id) {
		return "", status.Errorf(codes.Internal, "node ID %q is not a valid consensus member name", id)
	}
	return id, nil
}

// addConsensusMember adds node n to etcd as a learner, for its key and at
// the peer address it reported, and returns its join data.
func (r *rpcServer) addConsensusMember(ctx context.Context, n *cpb.Node) (*cpb.ConsensusJoinData, error) {
	name, err := consensusMemberName(n.Id)
	if err != nil {
		return nil, err
	}
	addr, err := netip.ParseAddr(n.GetStatus().GetExternalAddress())
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "node %s has not reported a valid external address (%q), which its consensus member would be reached at", n.Id, n.GetStatus().GetExternalAddress())
	}
	port := n.GetStatus().GetConsensusPeerPort()
	if port == 0 || port > 65535 {
		return nil, status.Errorf(codes.FailedPrecondition, "node %s has not reported a valid consensus peer port (%d)", n.Id, port)
	}
	peer := netip.AddrPortFrom(addr, uint16(port)).String()
	st, err := r.consensusStatus(ctx)
	if err != nil {
		return nil, err
	}
	members, err := st.Members(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "listing consensus members: %v", err)
	}
	learners := 0
	for _, m := range members {
		switch {
		case m.Name == name && m.Learner && !m.Started:
			// Added by an earlier attempt whose record update never
			// happened: its join data are lost, so add it afresh.
			if err := st.Remove(ctx, name); err != nil && !errors.Is(err, consensus.ErrNoMember) {
				return nil, status.Errorf(codes.Unavailable, "removing the unstarted learner %s left by an earlier attempt: %v", name, err)
			}
		case m.Name == name:
			return nil, status.Errorf(codes.FailedPrecondition, "node %s already runs a consensus member that its record does not show; take ConsensusMember away to remove it, then give it again", n.Id)
		case m.Address == peer:
			return nil, status.Errorf(codes.FailedPrecondition, "node %s: its consensus peer address %s is taken by member %s", n.Id, peer, m.Name)
		case m.Learner:
			learners++
		}
	}
	if learners >= consensus.MaxLearners {
		// etcd admits consensus.MaxLearners at a time: refuse with a
		// reason rather than etcd's.
		return nil, status.Errorf(codes.FailedPrecondition, "%d consensus members are still learners; give ConsensusMember to at most %d nodes at a time, and to the next once one of them is a voter (a learner that never starts is removed by taking its ConsensusMember away)", learners, consensus.MaxLearners)
	}
	var jd *consensus.JoinData
	err = reconfigure(ctx, func(ctx context.Context) (err error) {
		jd, err = addLearner(ctx, st, name, peer, ed25519.PublicKey(n.PublicKey))
		return err
	})
	if err != nil {
		return nil, reconfigureError(err, fmt.Sprintf("adding node %s as a consensus learner at %s", n.Id, peer))
	}
	out := &cpb.ConsensusJoinData{CaCertificate: jd.CACertificate, PeerCertificate: jd.PeerCertificate, Crl: jd.CRL}
	for _, p := range jd.Peers {
		out.Peers = append(out.Peers, &cpb.ConsensusPeer{Name: p.Name, Address: p.Address})
	}
	return out, nil
}

// addLearner is Status.AddLearner, retried where etcd refuses a member
// because it was removed: etcd derives a new member's ID from its peer
// address and the current second, so a member re-added at the address of
// one removed in the same second (a retry after a crash, a role taken and
// given back) gets the removed member's ID, which etcd never accepts again.
// The next second gives a fresh ID.
func addLearner(ctx context.Context, st *consensus.Status, name, peer string, pub ed25519.PublicKey) (*consensus.JoinData, error) {
	for attempt := 1; ; attempt++ {
		jd, err := st.AddLearner(ctx, name, peer, pub)
		if err == nil || !errors.Is(err, rpctypes.ErrMemberNotFound) || attempt == 3 {
			return jd, err
		}
		next := time.Now().Truncate(time.Second).Add(time.Second)
		t := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
	}
}

// undoAddLearner removes a learner whose role was not recorded, on a
// context that outlives the request (the request may have failed because
// its context ended). Failure is left to a retry of the request.
func (r *rpcServer) undoAddLearner(ctx context.Context, id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	if st, err := r.consensusStatus(ctx); err == nil {
		_ = st.Remove(ctx, id)
	}
}

// undoTimeout bounds undoAddLearner: etcd may refuse membership changes for
// up to five seconds after another one (its strict reconfiguration check).
const undoTimeout = 15 * time.Second

// removeConsensusMember removes node id's consensus member, if it has one,
// refusing where removal would break the control plane: the last voter
// cannot go. The leading curator's own member cannot be removed by that
// curator (it would stop in the middle of its own request): if another
// curator stands for election, it hands the leadership over and answers
// UNAVAILABLE, which the curator client retries on the new leader, where
// the removal goes ahead; if none does, it refuses.
func (r *rpcServer) removeConsensusMember(ctx context.Context, id string) error {
	name, err := consensusMemberName(id)
	if err != nil {
		return err
	}
	st, err := r.consensusStatus(ctx)
	if err != nil {
		return err
	}
	members, err := st.Members(ctx)
	if err != nil {
		return status.Errorf(codes.Unavailable, "listing consensus members: %v", err)
	}
	var target *consensus.Member
	voters := 0
	for _, m := range members {
		if m.Name == name {
			target = &m
		}
		if !m.Learner {
			voters++
		}
	}
	if target != nil && !target.Learner && voters <= 1 {
		return status.Errorf(codes.FailedPrecondition, "node %s holds the last consensus voter", id)
	}
	if id == r.s.nodeID {
		// Another voter exists (checked above); give its curator up to
		// two leases to stand for election if it is between terms.
		others, err := r.s.election.WaitOtherCandidates(ctx, 2*r.s.cfg.LeaseTTL)
		if err != nil {
			return status.Errorf(codes.Unavailable, "%v", err)
		}
		if others == 0 {
			return status.Errorf(codes.FailedPrecondition, "node %s runs the leading curator and no other curator runs to take over; give another node ConsensusMember first", id)
		}
		r.s.election.Resign()
		return status.Errorf(codes.Unavailable, "node %s runs the leading curator: handing the leadership over so that another curator removes its consensus member; retry", id)
	}
	err = reconfigure(ctx, func(ctx context.Context) error { return st.Remove(ctx, name) })
	if err != nil && !errors.Is(err, consensus.ErrNoMember) {
		return reconfigureError(err, "removing the consensus member of node "+id)
	}
	return nil
}

// reconfigureWait bounds how long a membership change waits for etcd to
// accept it. etcd refuses changes until every voter has been connected for
// five seconds (its strict reconfiguration check), which consensus waits
// out; a change still refused after three times that will not be accepted
// until the operator brings the missing member back, and is refused.
const reconfigureWait = 15 * time.Second

// errReconfigureWait ends a membership change that etcd did not accept
// within reconfigureWait.
var errReconfigureWait = errors.New("etcd did not accept the membership change")

// reconfigure runs change, a change of etcd's membership, bounded by
// reconfigureWait.
func reconfigure(ctx context.Context, change func(context.Context) error) error {
	cctx, cancel := context.WithTimeoutCause(ctx, reconfigureWait, errReconfigureWait)
	defer cancel()
	err := change(cctx)
	if err != nil && ctx.Err() == nil && context.Cause(cctx) == errReconfigureWait {
		return fmt.Errorf("%w within %v: %w", errReconfigureWait, reconfigureWait, err)
	}
	return err
}

// reconfigureError is the status of a failed membership change: a change
// etcd keeps refusing for the consensus cluster's health is the operator's
// to fix (FAILED_PRECONDITION, not retried), anything else UNAVAILABLE (a
// retry, on this curator or the next leader, may succeed).
func reconfigureError(err error, what string) error {
	switch {
	case errors.Is(err, errReconfigureWait):
		return status.Errorf(codes.FailedPrecondition, "%s: the consensus cluster is not healthy enough to change its membership (etcd accepts changes only while every voter is connected): %v; check that every consensus member is running and HEALTHY (polisctl node list), then retry", what, err)
	case errors.Is(err, rpctypes.ErrMemberNotEnoughStarted):
		return status.Errorf(codes.FailedPrecondition, "%s: the consensus cluster refuses the change, which would leave it without a quorum of running members: %v; bring the stopped consensus members back first", what, err)
	}
	return status.Errorf(codes.Unavailable, "%s: %v", what, err)
}

// DecommissionNode takes the node's roles away the way UpdateNodeRoles
// would (consensus member first, record after; a retry converges) and
// marks it DECOMMISSIONED in the same write that clears its roles.
func (r *rpcServer) DecommissionNode(ctx context.Context, req *cpb.DecommissionNodeRequest) (*cpb.DecommissionNodeResponse, error) {
	if err := checkNodeIDArg(req.NodeId); err != nil {
		return nil, err
	}
	l := leaderFrom(ctx)
	l.membership.Lock()
	defer l.membership.Unlock()

	check := func(n *cpb.Node) error {
		switch {
		case n == nil:
			return nodeNotFound(req.NodeId)
		case n.State == cpb.NodeState_NODE_STATE_NEW || n.State == cpb.NodeState_NODE_STATE_STANDBY:
			return status.Errorf(codes.FailedPrecondition, "node %s is %s: only UP nodes are decommissioned; delete it instead", n.Id, n.State)
		}
		return nil
	}
	cur, _, err := getNode(ctx, r.s.cfg.Client, req.NodeId)
	if err != nil {
		return nil, leaderWriteError(err)
	}
	if err := check(cur); err != nil {
		return nil, err
	}
	if cur.State == cpb.NodeState_NODE_STATE_DECOMMISSIONED {
		return &cpb.DecommissionNodeResponse{}, nil
	}
	// Every UP node, not only those whose record shows the role, so that
	// a member left behind by a crash goes too.
	if err := r.removeConsensusMember(ctx, req.NodeId); err != nil {
		return nil, err
	}
	_, err = r.changeNode(ctx, req.NodeId, func(n *cpb.Node) (*cpb.Node, error) {
		if err := check(n); err != nil {
			return nil, err
		}
		n.State = cpb.NodeState_NODE_STATE_DECOMMISSIONED
		n.Roles = nil
		return n, nil
	})
	if err != nil {
		return nil, err
	}
	return &cpb.DecommissionNodeResponse{}, nil
}

// DeleteNode removes the record of a node that is not UP, with
// compare-and-swap on the record's revision so that a node that became UP
// meanwhile is not deleted. A DECOMMISSIONED node's key is retired in the
// same transaction, so that it can never register again.
func (r *rpcServer) DeleteNode(ctx context.Context, req *cpb.DeleteNodeRequest) (*cpb.DeleteNodeResponse, error) {
	if err := checkNodeIDArg(req.NodeId); err != nil {
		return nil, err
	}
	l := leaderFrom(ctx)
	// Serialised with Register, so that a registration cannot slip in
	// between the record's deletion and the key's retirement check.
	l.registration.Lock()
	defer l.registration.Unlock()
	for {
		n, rev, err := getNode(ctx, r.s.cfg.Client, req.NodeId)
		if err != nil {
			return nil, leaderWriteError(err)
		}
		switch {
		case n == nil:
			return nil, nodeNotFound(req.NodeId)
		case n.State == cpb.NodeState_NODE_STATE_UP:
			return nil, status.Errorf(codes.FailedPrecondition, "node %s is UP: decommission it first", n.Id)
		}
		key := nodeKey(req.NodeId)
		unchanged := clientv3.Compare(clientv3.ModRevision(key), "=", rev)
		// The node's cluster part goes with it (rpc_clusterpart.go).
		ops := []clientv3.Op{clientv3.OpDelete(key), clientv3.OpDelete(clusterPartKey(n.Id))}
		if release, ok := releasePodRangeOp(n); ok {
			// Back to the pool in the same write (podnetwork.go).
			ops = append(ops, release)
		}
		if n.State == cpb.NodeState_NODE_STATE_DECOMMISSIONED {
			// Its key is retired for good, in the same write: the record
			// no longer says "decommissioned", so this must (see
			// registration.go).
			ops = append(ops, clientv3.OpPut(retiredKey(n.Id), string(n.PublicKey)))
		}
		_, ok, err := l.leadership.Txn(ctx, []clientv3.Cmp{unchanged}, ops, nil)
		if err != nil {
			return nil, leaderWriteError(err)
		}
		if ok {
			return &cpb.DeleteNodeResponse{}, nil
		}
	}
}

func (r *rpcServer) UpdateNodeLabels(ctx context.Context, req *cpb.UpdateNodeLabelsRequest) (*cpb.UpdateNodeLabelsResponse, error) {
	if err := checkNodeIDArg(req.NodeId); err != nil {
		return nil, err
	}
	// Sorted, so that the error names the same label every time.
	for _, k := range slices.Sorted(maps.Keys(req.Set)) {
		if err := validateLabelKey(k); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "label key %s: %v", quoted(k), err)
		}
		if err := validateLabelValue(req.Set[k]); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "label %s: value %s: %v", quoted(k), quoted(req.Set[k]), err)
		}
	}
	for _, k := range req.Remove {
		if err := validateLabelKey(k); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "label key %s to remove: %v", quoted(k), err)
		}
		if _, ok := req.Set[k]; ok {
			return nil, status.Errorf(codes.InvalidArgument, "label key %q is both set and removed", k)
		}
	}
	next, err := r.changeNode(ctx, req.NodeId, func(n *cpb.Node) (*cpb.Node, error) {
		if n == nil {
			return nil, nodeNotFound(req.NodeId)
		}
		labels := maps.Clone(n.Labels)
		if labels == nil {
			labels = map[string]string{}
		}
		maps.Copy(labels, req.Set)
		for _, k := range req.Remove {
			delete(labels, k)
		}
		if len(labels) > maxLabels {
			return nil, status.Errorf(codes.ResourceExhausted, "node %s would have %d labels, more than the %d allowed", n.Id, len(labels), maxLabels)
		}
		n.Labels = labels
		return n, nil
	})
	if err != nil {
		return nil, err
	}
	return &cpb.UpdateNodeLabelsResponse{Labels: next.Labels}, nil
}

// checkNodeIDArg checks a request's node_id.
func checkNodeIDArg(id string) error {
	if err := identity.ValidateNodeID(id); err != nil {
		return status.Errorf(codes.InvalidArgument, "node_id: %v", err)
	}
	return nil
}

func nodeNotFound(id string) error {
	return status.Errorf(codes.NotFound, "node %s does not exist", id)
}
