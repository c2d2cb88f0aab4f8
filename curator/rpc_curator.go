package curator

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"crypto/subtle"
	"crypto/x509"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/internal/rpcauth"
)

// CuratorService: the calls nodes make.
//
// Every handler here acts on the caller's own key or node, never on one
// named in the request: the KEY_HOLDER calls on the node whose ID derives
// from the key the caller proved in the handshake, the NODE_SELF calls on
// the node its certificate names. Writes go through the leader's guarded
// transaction (updateNode), so a curator that lost the leadership while a
// call was under way changes nothing. A refused request changes nothing
// either: every check is made inside the update, before anything is
// written.

// watchBatchSize is the most records (and tombstones) one Watch message
// carries. The initial state of a large cluster is split so that no single
// message approaches gRPC's size limit (4 MiB by default) and the first
// records reach the watcher early; 128 records of a few hundred bytes each
// keep messages in the tens of kilobytes.
const watchBatchSize = 128

// maxBatchBytes bounds the encoded records of one Watch or ListNodes
// message, whatever the count: records are capped (maxNodeRecordSize), but
// 128 records near the cap would exceed gRPC's 4 MiB limit, and a message
// over the receiver's limit breaks the whole stream.
const maxBatchBytes = 1 << 20

func (r *rpcServer) GetLeader(ctx context.Context, _ *cpb.GetLeaderRequest) (*cpb.GetLeaderResponse, error) {
	st := r.s.election.Current()
	if st.Leader == nil {
		return nil, status.Error(codes.Unavailable, "no leader is known (an election is under way)")
	}
	var leader cpb.CuratorEndpoint
	if err := proto.Unmarshal(st.Leader, &leader); err != nil {
		return nil, status.Errorf(codes.Internal, "the leader's election entry is corrupt: %v", err)
	}
	return &cpb.GetLeaderResponse{Leader: &leader, Responder: r.self}, nil
}

// GetCACertificate answers with the CA certificate and, given a challenge,
// the proof that this curator knows the register ticket (ticket.go).
func (r *rpcServer) GetCACertificate(ctx context.Context, req *cpb.GetCACertificateRequest) (*cpb.GetCACertificateResponse, error) {
	resp := &cpb.GetCACertificateResponse{CaCertificate: r.ca.Certificate().Raw}
	challenge := req.GetRegisterTicketChallenge()
	if len(challenge) == 0 {
		return resp, nil
	}
	if len(challenge) != RegisterTicketChallengeSize {
		return nil, status.Errorf(codes.InvalidArgument, "register_ticket_challenge is %d bytes, want %d", len(challenge), RegisterTicketChallengeSize)
	}
	// A local read: anyone may ask, so the answer costs no quorum round;
	// a ticket rotated a moment ago fails the node's check once, and the
	// node asks again.
	t, err := r.s.cfg.Client.Get(ctx, ticketKey, clientv3.WithSerializable())
	if err != nil {
		return nil, leaderWriteError(fmt.Errorf("reading the register ticket: %w", err))
	}
	if len(t.Kvs) == 0 {
		return nil, status.Error(codes.Unavailable, "this curator's store holds no register ticket yet")
	}
	resp.RegisterTicketProof = RegisterTicketProof(t.Kvs[0].Value, challenge, resp.CaCertificate)
	return resp, nil
}

// GetOwnerKey returns the current owner key, read from etcd as
// checkUserStanding reads it, for nodes to check owner certificates with.
func (r *rpcServer) GetOwnerKey(ctx context.Context, _ *cpb.GetOwnerKeyRequest) (*cpb.GetOwnerKeyResponse, error) {
	key, err := r.s.ownerKey(ctx)
	if err != nil {
		return nil, err
	}
	return &cpb.GetOwnerKeyResponse{OwnerKey: key}, nil
}

// checkTicket compares ticket with the cluster's register ticket in
// constant time, so that the answer's timing tells nothing about how much
// of a guess was right.
func (r *rpcServer) checkTicket(ctx context.Context, ticket []byte) error {
	resp, err := r.s.cfg.Client.Get(ctx, ticketKey)
	if err != nil {
		return leaderWriteError(fmt.Errorf("reading the register ticket: %w", err))
	}
	if len(resp.Kvs) == 0 {
		return status.Error(codes.Internal, "the cluster has no register ticket (its state is not initialised)")
	}
	if subtle.ConstantTimeCompare(ticket, resp.Kvs[0].Value) != 1 {
		return status.Error(codes.PermissionDenied, "wrong register ticket")
	}
	return nil
}

func (r *rpcServer) CommitRegistration(ctx context.Context, _ *cpb.CommitRegistrationRequest) (*cpb.CommitRegistrationResponse, error) {
	pub := callerFrom(ctx).PublicKey
	id := identity.NodeID(pub)
	if err := r.checkNotRetired(ctx, id); err != nil {
		return nil, err
	}
	n, err := r.changeNode(ctx, id, func(n *cpb.Node) (*cpb.Node, error) {
		if n == nil {
			return nil, status.Errorf(codes.NotFound, "node %s is not registered: Register first", id)
		}
		switch n.State {
		case cpb.NodeState_NODE_STATE_NEW:
			return nil, status.Errorf(codes.FailedPrecondition, "node %s is NEW: it waits for an operator's approval (ApproveNode)", id)
		case cpb.NodeState_NODE_STATE_STANDBY:
			n.State = cpb.NodeState_NODE_STATE_UP
			return n, nil
		case cpb.NodeState_NODE_STATE_UP:
			return n, nil // a retry: only the certificate is new
		case cpb.NodeState_NODE_STATE_DECOMMISSIONED:
			return nil, errNodeDecommissioned(id)
		default:
			return nil, status.Errorf(codes.Internal, "node %s has invalid state %v", id, n.State)
		}
	})
	if err != nil {
		return nil, err
	}
	// The node's next call, with the certificate it is about to get, is
	// authorised against the node cache, which follows etcd a moment
	// behind: wait until the cache has seen the commit, so that the call
	// is not refused as coming from a node that is not UP yet.
	if _, err := event.Get(ctx, r.s.nodes.Snapshots(), event.Filter(func(s *nodeSnapshot) bool {
		c := s.nodes[id]
		return s.complete && (c == nil || (c.State != cpb.NodeState_NODE_STATE_NEW && c.State != cpb.NodeState_NODE_STATE_STANDBY))
	})); err != nil {
		return nil, status.Errorf(codes.Unavailable, "waiting for the curator's view of node %s: %v", id, err)
	}
	// The state is written before the certificate is issued: if issuing
	// fails, the node is UP without credentials and gets them by retrying,
	// which succeeds again for UP nodes.
	cert, dir, err := r.admit(ctx, n)
	if err != nil {
		return nil, err
	}
	return &cpb.CommitRegistrationResponse{NodeCertificate: cert.Raw, ClusterDirectory: dir}, nil
}

func (r *rpcServer) Join(ctx context.Context, _ *cpb.JoinRequest) (*cpb.JoinResponse, error) {
	id := identity.NodeID(callerFrom(ctx).PublicKey)
	// Read from etcd, not the node cache: a node decommissioned a moment
	// ago must not be readmitted from a stale view.
	n, _, err := getNode(ctx, r.s.cfg.Client, id)
	if err != nil {
		return nil, leaderWriteError(err)
	}
	switch {
	case n == nil:
		if err := r.checkNotRetired(ctx, id); err != nil {
			return nil, err
		}
		return nil, status.Errorf(codes.NotFound, "node %s is not part of the cluster (deleted or never registered)", id)
	case n.State == cpb.NodeState_NODE_STATE_DECOMMISSIONED:
		return nil, errNodeDecommissioned(id)
	case n.State != cpb.NodeState_NODE_STATE_UP:
		return nil, status.Errorf(codes.FailedPrecondition, "node %s is %v; only UP nodes may join", id, n.State)
	}
	cert, dir, err := r.admit(ctx, n)
	if err != nil {
		return nil, err
	}
	return &cpb.JoinResponse{NodeCertificate: cert.Raw, ClusterDirectory: dir}, nil
}

func (r *rpcServer) UpdateNodeStatus(ctx context.Context, req *cpb.UpdateNodeStatusRequest) (*cpb.UpdateNodeStatusResponse, error) {
	if req.Status == nil {
		return nil, status.Error(codes.InvalidArgument, "status is required")
	}
	if err := validateNodeStatus(req.Status); err != nil {
		return nil, err
	}
	id := callerFrom(ctx).NodeID
	_, err := r.changeNode(ctx, id, func(n *cpb.Node) (*cpb.Node, error) {
		// The caller was UP when the call was authorised; it may have been
		// deleted or decommissioned since.
		if err := nodeStillUp(id, n); err != nil {
			return nil, err
		}
		n.Status = req.Status
		return n, nil
	})
	if err != nil {
		return nil, err
	}
	return &cpb.UpdateNodeStatusResponse{}, nil
}

func (r *rpcServer) Heartbeat(ctx context.Context, _ *cpb.HeartbeatRequest) (*cpb.HeartbeatResponse, error) {
	// Recorded in etcd with the others of this interval (heartbeats.go).
	r.s.heartbeats.heard(callerFrom(ctx).NodeID, r.s.cfg.Now())
	return &cpb.HeartbeatResponse{Interval: durationpb.New(r.s.cfg.HeartbeatInterval)}, nil
}

func (r *rpcServer) RenewCertificate(ctx context.Context, _ *cpb.RenewCertificateRequest) (*cpb.RenewCertificateResponse, error) {
	id := callerFrom(ctx).NodeID
	n, _, err := getNode(ctx, r.s.cfg.Client, id)
	if err != nil {
		return nil, leaderWriteError(err)
	}
	if err := nodeStillUp(id, n); err != nil {
		return nil, err
	}
	cert, err := r.issueNodeCertificate(ctx, n)
	if err != nil {
		return nil, err
	}
	apiCert, err := leaderFrom(ctx).ca.IssueNodeAPI(ed25519.PublicKey(n.PublicKey), r.nodeAPIAddress(ctx, n), r.s.cfg.Now())
	if err != nil {
		return nil, status.Errorf(codes.Internal, "issuing a node API certificate for node %s: %v", n.Id, err)
	}
	return &cpb.RenewCertificateResponse{NodeCertificate: cert.Raw, CaCertificate: leaderFrom(ctx).ca.Certificate().Raw, NodeApiCertificate: apiCert.Raw}, nil
}

// Watch streams node records from the node cache, which holds the one etcd
// watch of the curator: a watching node costs a cursor on an in-memory
// value, not an etcd watch. The cache's snapshots are immutable and share
// unchanged records, so what changed since the last message is exactly the
// records whose pointers differ, among those the snapshots in between list
// as changed (watchChanges).
//
// Every curator serves it (SERVE_ANY). The initial state holds every write
// acknowledged before the call (the interceptor fenced the cache); after
// that the stream trails etcd by the time a watch event takes to reach
// this curator. A stream whose curator stops following etcd ends with
// UNAVAILABLE, so that its node watches again, elsewhere if need be,
// instead of waiting on a view that no longer moves.
func (r *rpcServer) Watch(req *cpb.WatchRequest, stream grpc.ServerStreamingServer[cpb.WatchResponse]) error {
	ctx := stream.Context()
	var only string // the one node watched; "" for all
	switch t := req.Target.(type) {
	case *cpb.WatchRequest_NodeId:
		if err := identity.ValidateNodeID(t.NodeId); err != nil {
			return status.Errorf(codes.InvalidArgument, "node_id: %v", err)
		}
		only = t.NodeId
	case *cpb.WatchRequest_AllNodes:
	default:
		return status.Error(codes.InvalidArgument, "target is required: node_id or all_nodes")
	}
	caller := callerFrom(ctx)
	var sent *nodeSnapshot // the snapshot the watcher has, nil before the initial state
	return r.followNodes(ctx, caller.NodeID, func(snap *nodeSnapshot) error {
		changed, deleted := watchChanges(sent, snap, only)
		initial := sent == nil
		sent = snap
		if !initial && len(changed) == 0 && len(deleted) == 0 {
			return nil
		}
		for _, msg := range watchMessages(changed, deleted, caller.NodeID, initial) {
			if err := stream.Send(msg); err != nil {
				return err
			}
		}
		return nil
	})
}

// WatchClusterDirectory streams the directory of the node cache's
// snapshots, sending only when their curator set changed (nodeSnapshot.curators
// is shared until it does): a change to an ordinary node wakes the stream
// for one comparison and sends nothing. Every curator serves it, fenced
// like Watch.
func (r *rpcServer) WatchClusterDirectory(_ *cpb.WatchClusterDirectoryRequest, stream grpc.ServerStreamingServer[cpb.WatchClusterDirectoryResponse]) error {
	ctx := stream.Context()
	var sent *curatorSet
	return r.followNodes(ctx, callerFrom(ctx).NodeID, func(snap *nodeSnapshot) error {
		if snap.curators == sent {
			return nil
		}
		sent = snap.curators
		return stream.Send(&cpb.WatchClusterDirectoryResponse{Directory: directoryOf(snap, r.ca.Certificate().Raw)})
	})
}

// followNodes calls send with each new complete snapshot of the node
// cache, from the newest at the call on, until send fails or the stream
// must end: a stream outlives neither its curator's following of etcd (the
// cache would stop moving; the node watches again and reaches a curator
// that follows) nor the standing of its caller, the node self: a node
// decommissioned or deleted while it watches is cut off like every other
// call of it.
func (r *rpcServer) followNodes(ctx context.Context, self string, send func(*nodeSnapshot) error) error {
	var in event.Inputs
	defer in.Close()
	following := event.Input(&in, r.s.nodes.watchHealth(), nil)
	nodes := event.Input(&in, r.s.nodes.Snapshots(), func(s *nodeSnapshot) bool { return s.complete })
	wasFollowing := false
	for {
		if _, err := in.Wait(ctx); err != nil {
			if ctx.Err() != nil {
				return status.FromContextError(ctx.Err()).Err()
			}
			return status.Errorf(codes.Unavailable, "watching nodes: %v", err)
		}
		if following.Latest().Connected {
			wasFollowing = true
		} else if wasFollowing {
			return status.Errorf(codes.Unavailable, "this curator lost its watch of etcd (%v); watch again", following.Latest().Err)
		}
		snap := nodes.Latest()
		if err := nodeStillUp(self, snap.nodes[self]); err != nil {
			return err
		}
		if err := send(snap); err != nil {
			return err
		}
	}
}

// watchChanges is what a watcher that has snapshot sent (nil: nothing
// yet) must be sent to have snap: from the snapshots' change lists when
// they are fewer than the records, so that one record change costs each
// watcher a look at that record, not a walk over the cluster.
func watchChanges(sent, snap *nodeSnapshot, only string) (changed []*cpb.Node, deleted []string) {
	if sent == nil {
		return diffNodes(nil, snap.nodes, only)
	}
	if only == "" {
		if ids, ok := snap.changedSince(sent, len(snap.nodes)); ok {
			for _, id := range ids {
				p, n := sent.nodes[id], snap.nodes[id]
				switch {
				case n != nil && n != p:
					changed = append(changed, n)
				case n == nil && p != nil:
					deleted = append(deleted, id)
				}
			}
			return changed, deleted
		}
	}
	return diffNodes(sent.nodes, snap.nodes, only)
}

// diffNodes lists the records in next that are new or differ from prev, and
// the IDs in prev that next no longer holds, both in ID order; only, if set,
// restricts both to one node.
func diffNodes(prev, next map[string]*cpb.Node, only string) (changed []*cpb.Node, deleted []string) {
	if only != "" {
		p, n := prev[only], next[only]
		switch {
		case n != nil && n != p:
			changed = append(changed, n)
		case n == nil && p != nil:
			deleted = append(deleted, only)
		}
		return changed, deleted
	}
	for id, n := range next {
		if prev[id] != n {
			changed = append(changed, n)
		}
	}
	for id := range prev {
		if _, ok := next[id]; !ok {
			deleted = append(deleted, id)
		}
	}
	slices.SortFunc(changed, func(a, b *cpb.Node) int { return cmp.Compare(a.Id, b.Id) })
	slices.Sort(deleted)
	return changed, deleted
}

// watchMessages splits changes into messages of at most watchBatchSize
// entries and, but for a single record, maxBatchBytes of records, each record as watcher may see it. For the initial state the
// last message is marked complete, and there is always one, even for no
// nodes at all, so that the watcher learns the initial state is complete.
func watchMessages(changed []*cpb.Node, deleted []string, watcher string, initial bool) []*cpb.WatchResponse {
	var msgs []*cpb.WatchResponse
	msg := &cpb.WatchResponse{}
	size := 0
	flush := func() {
		msgs = append(msgs, msg)
		msg = &cpb.WatchResponse{}
		size = 0
	}
	for _, n := range changed {
		out := nodeForWatcher(n, watcher)
		s := proto.Size(out)
		if len(msg.Nodes) > 0 && size+s > maxBatchBytes {
			flush()
		}
		msg.Nodes = append(msg.Nodes, out)
		size += s
		if len(msg.Nodes) == watchBatchSize {
			flush()
		}
	}
	for _, id := range deleted {
		msg.NodeTombstones = append(msg.NodeTombstones, &cpb.NodeTombstone{NodeId: id})
		if len(msg.Nodes)+len(msg.NodeTombstones) == watchBatchSize {
			flush()
		}
	}
	if len(msg.Nodes)+len(msg.NodeTombstones) > 0 || len(msgs) == 0 {
		flush()
	}
	if initial {
		msgs[len(msgs)-1].InitialStateComplete = true
	}
	return msgs
}

// nodeForWatcher is n as watcher may see it: without health (judged per
// call, and a watch would turn every heartbeat into an update for every
// watcher), and without consensus join data unless n is the watcher
// itself. n is shared with the node cache and never modified; a copy is
// made only when something must go.
func nodeForWatcher(n *cpb.Node, watcher string) *cpb.Node {
	foreignJoinData := n.Id != watcher && n.GetRoles().GetConsensusMember().GetJoinData() != nil
	if !foreignJoinData && n.Health == cpb.NodeHealth_NODE_HEALTH_UNSPECIFIED && n.TimeSinceHeartbeat == nil {
		return n
	}
	c := proto.Clone(n).(*cpb.Node)
	c.Health = cpb.NodeHealth_NODE_HEALTH_UNSPECIFIED
	c.TimeSinceHeartbeat = nil
	if foreignJoinData {
		c.Roles.ConsensusMember.JoinData = nil
	}
	return c
}

// nodeStillUp refuses a NODE or NODE_SELF caller whose record (n, nil if
// gone) no longer admits it: the authorization before the handler checked
// this against a view that may since have changed.
func nodeStillUp(id string, n *cpb.Node) error {
	switch {
	case n == nil:
		return status.Errorf(codes.PermissionDenied, "node %s is not part of the cluster (deleted or never registered)", id)
	case n.State == cpb.NodeState_NODE_STATE_DECOMMISSIONED:
		return errNodeDecommissioned(id)
	case n.State != cpb.NodeState_NODE_STATE_UP:
		return status.Errorf(codes.PermissionDenied, "node %s is %v, not UP", id, n.State)
	}
	return nil
}

// admit returns what an UP node gets when it is admitted, by
// CommitRegistration or Join: a node certificate, and the cluster directory
// to find the curators with it.
func (r *rpcServer) admit(ctx context.Context, n *cpb.Node) (*x509.Certificate, *cpb.ClusterDirectory, error) {
	cert, err := r.issueNodeCertificate(ctx, n)
	if err != nil {
		return nil, nil, err
	}
	dir, err := r.clusterDirectory(ctx)
	if err != nil {
		return nil, nil, err
	}
	return cert, dir, nil
}

// issueNodeCertificate issues n a node certificate for its key. It names
// no address: a node certificate only authenticates the node to the
// curator, and nothing a node reports about itself goes into a
// certificate (curators serve with their own, see certificate.go).
func (r *rpcServer) issueNodeCertificate(ctx context.Context, n *cpb.Node) (*x509.Certificate, error) {
	cert, err := leaderFrom(ctx).ca.IssueNode(ed25519.PublicKey(n.PublicKey), r.s.cfg.Now())
	if err != nil {
		return nil, status.Errorf(codes.Internal, "issuing a certificate for node %s: %v", n.Id, err)
	}
	return cert, nil
}

// nodeAPIAddress is the address the node API certificate of n names: the
// address n's record reports, which is what node list shows and clients
// dial. It is the node's own claim, so it is named only while no other
// node's record reports the same address: a node cannot get a
// certificate for an address another node holds (only for one no node has
// claimed yet). An address that does not parse, or that cannot be checked
// now, is left out (the zero Addr), and the node asks again; the node ID,
// which the key proves, is always named.
func (r *rpcServer) nodeAPIAddress(ctx context.Context, n *cpb.Node) netip.Addr {
	addr, err := netip.ParseAddr(n.GetStatus().GetExternalAddress())
	if err != nil || addr.IsUnspecified() {
		return netip.Addr{}
	}
	// A consistent read: a claim acknowledged before this call counts.
	snap, err := r.s.nodes.fenced(ctx)
	if err != nil {
		return netip.Addr{}
	}
	for id, o := range snap.nodes {
		if id == n.Id {
			continue
		}
		if a, err := netip.ParseAddr(o.GetStatus().GetExternalAddress()); err == nil && a.Unmap() == addr.Unmap() {
			return netip.Addr{}
		}
	}
	return addr
}

// clusterDirectory is the cluster directory as the node cache has it: at
// the snapshot the call was fenced on, if it was, or now.
func (r *rpcServer) clusterDirectory(ctx context.Context) (*cpb.ClusterDirectory, error) {
	snap := fencedFrom(ctx)
	if snap == nil {
		var err error
		if snap, err = r.s.nodes.current(ctx); err != nil {
			return nil, status.Errorf(codes.Unavailable, "the curator's view of nodes is not ready: %v", err)
		}
	}
	return directoryOf(snap, r.ca.Certificate().Raw), nil
}

// directoryOf is the cluster directory of snap (curatorEndpoint says who
// is a curator).
func directoryOf(snap *nodeSnapshot, caCert []byte) *cpb.ClusterDirectory {
	return &cpb.ClusterDirectory{Curators: snap.curators.endpoints, CaCertificate: caCert}
}

// changeNode is updateNode for a handler: change's refusals reach the
// caller as they are, and failures of the store become UNAVAILABLE, which
// clients retry (at the new leader, if leadership moved).
func (r *rpcServer) changeNode(ctx context.Context, id string, change func(n *cpb.Node) (*cpb.Node, error)) (*cpb.Node, error) {
	return r.changeNodeTxn(ctx, id, func(n *cpb.Node) (*cpb.Node, []clientv3.Cmp, []clientv3.Op, error) {
		next, err := change(n)
		return next, nil, nil, err
	})
}

// changeNodeTxn is changeNode for a change that writes more than the
// record (see updateNodeTxn).
func (r *rpcServer) changeNodeTxn(ctx context.Context, id string, change func(n *cpb.Node) (*cpb.Node, []clientv3.Cmp, []clientv3.Op, error)) (*cpb.Node, error) {
	return r.handleNodeChange(id, nil, func(change nodeChange) (*cpb.Node, error) {
		return updateNodeTxn(ctx, leaderFrom(ctx).leadership, r.s.cfg.Client, id, change)
	}, change)
}

// nodeChange plans a change of a node record (see updateNodeTxn).
type nodeChange = func(n *cpb.Node) (*cpb.Node, []clientv3.Cmp, []clientv3.Op, error)

// handleNodeChange makes change through update (updateNodeTxn, or
// d.updateNode for a confirmedByWrite handler, d its deferred checks) and
// gives the handler's caller what came of it: change's refusals as they
// are; a record that passed the handler's checks but fails the store's
// refused (INVALID_ARGUMENT) rather than retried; with deferred checks, a
// caller who no longer stands PERMISSION_DENIED and a curator that does
// not lead told so as by authorize; other failures of the store
// UNAVAILABLE, which clients retry (leaderWriteError).
func (r *rpcServer) handleNodeChange(id string, d *deferredChecks, update func(nodeChange) (*cpb.Node, error), change nodeChange) (*cpb.Node, error) {
	var refusal error
	n, err := update(func(n *cpb.Node) (*cpb.Node, []clientv3.Cmp, []clientv3.Op, error) {
		next, cmps, ops, err := change(n)
		refusal = err
		return next, cmps, ops, err
	})
	switch {
	case err == nil:
		return n, nil
	case refusal != nil && err == refusal:
		return nil, err
	case d != nil && errors.Is(err, errStandingLost):
		return nil, status.Error(codes.PermissionDenied, rpcauth.ErrOwnerKeyRotated.Error())
	case errors.Is(err, errInvalidRecord):
		return nil, status.Errorf(codes.InvalidArgument, "%v", err)
	case d != nil && errors.Is(err, ErrNotLeader):
		return nil, r.s.notLeader()
	default:
		return nil, leaderWriteError(fmt.Errorf("updating node %s: %w", id, err))
	}
}

// leaderWriteError turns an error of the store into the status a caller
// gets. The store's errors are themselves gRPC statuses (etcd's); passing
// them on as they are would give the caller codes about etcd's API, not
// about its request.
func leaderWriteError(err error) error {
	switch {
	case errors.Is(err, ErrNotLeader):
		return status.Errorf(codes.Unavailable, "this curator lost the leadership during the call; retry at the new leader: %v", err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	default:
		return status.Errorf(codes.Unavailable, "the cluster store: %v", err)
	}
}
