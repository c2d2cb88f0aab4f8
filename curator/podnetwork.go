package curator

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/kube/controlplane"
	"github.com/polis-os/polis/supervisor"
)

// The pod network: every node that holds KubernetesWorker or
// KubernetesController (needsPodRange) gets its own pod range out of the
// cluster's (PodNetwork, chosen at bootstrap), so that Pods on different
// nodes never share an address and each node can route to the others'
// Pods by their range. A worker gives its range to its Pods; a node that
// holds KubernetesController alone runs no Pods and uses only the range's
// first address, as its WireGuard tunnel's own: the workers accept its
// packets (a peer's source must lie in its range) and their Pods' replies
// route back to it, so its apiserver reaches webhooks, aggregated APIs
// and the Pods its proxy subresources serve.
//
// Who has which range is kept twice, in one transaction: in the node's
// record (NodeNetwork.pod_range, what watchers and polisctl see) and under
// podRangePrefix, one key per range given out, naming its node. The key is
// the lock: a range is given only by a transaction that creates its key
// (CreateRevision = 0), so two curators, or a deposed leader and its
// successor, can never give one range twice, even where both read the same
// free list; the loser's transaction fails and it chooses again. A range
// stays with its node when its roles are taken away and given again, and
// across reboots; it goes back to the pool only when the node's record is
// deleted, in the deleting transaction.

const (
	// podNetworkKey holds the cluster's cpb.PodNetwork, written at
	// bootstrap with the defaults filled in; absent (a cluster
	// bootstrapped before pod ranges existed), the defaults apply.
	podNetworkKey = "cluster/pod-network"
	// podRangePrefix holds, under each range given out ("10.244.3.0/24"),
	// the ID of the node that has it.
	podRangePrefix = "podranges/"
)

// DefaultPodRange is the cluster pod range unless bootstrap says
// otherwise: 1,024 node ranges of DefaultNodePodPrefixLength, clear of the
// launcher's cluster networks (10.77.0.0/24 for VMs, loopback for
// processes), Kubernetes' service range (controlplane.DefaultServiceCIDR,
// 10.96.0.0/12) and the single-node range kubelets used before
// (10.88.0.0/16).
var DefaultPodRange = netip.MustParsePrefix("10.244.0.0/14")

// DefaultNodePodPrefixLength is the prefix length of each node's pod
// range: 256 addresses, about 250 Pods.
const DefaultNodePodPrefixLength = 24

// maxNodePodPrefixLength is the longest node pod range: 16 addresses,
// a dozen Pods after the network, bridge and broadcast addresses.
const maxNodePodPrefixLength = 28

// maxNodePodRanges caps how many node ranges a cluster range may hold, so
// that choosing a free one stays a short walk.
const maxNodePodRanges = 1 << 16

// CheckPodNetwork checks a pod network given at bootstrap (nil is the
// defaults), with an error naming what is wrong. Bootstrap checks it; the
// node agent checks its parameters with it first.
func CheckPodNetwork(p *cpb.PodNetwork) error {
	if p == nil {
		return nil
	}
	if err := checkNoUnknownFields("pod network", p); err != nil {
		return err
	}
	_, _, err := parsePodNetwork(withPodNetworkDefaults(p))
	return err
}

// parsePodNetwork checks p, defaults filled in, and returns its cluster
// range and node prefix length.
func parsePodNetwork(p *cpb.PodNetwork) (netip.Prefix, int, error) {
	r, err := netip.ParsePrefix(p.ClusterRange)
	if err != nil {
		return netip.Prefix{}, 0, fmt.Errorf("pod network: cluster range %q: want an IPv4 prefix such as %s: %w", p.ClusterRange, DefaultPodRange, err)
	}
	bits := int(p.NodePrefixLength)
	reserved := reservedOverlap(r)
	switch {
	case !r.Addr().Is4():
		return netip.Prefix{}, 0, fmt.Errorf("pod network: cluster range %s: only IPv4 pod ranges are supported", r)
	case r.Masked() != r:
		return netip.Prefix{}, 0, fmt.Errorf("pod network: cluster range %s has host bits set; did you mean %s?", r, r.Masked())
	case reserved != nil:
		return netip.Prefix{}, 0, fmt.Errorf("pod network: cluster range %s overlaps %s (%s), addresses no Pod may have", r, reserved.prefix, reserved.what)
	case r.Overlaps(controlplane.DefaultServiceCIDR):
		return netip.Prefix{}, 0, fmt.Errorf("pod network: cluster range %s overlaps the Kubernetes service range %s", r, controlplane.DefaultServiceCIDR)
	case bits <= r.Bits() || bits > maxNodePodPrefixLength:
		return netip.Prefix{}, 0, fmt.Errorf("pod network: node prefix length %d: want longer than the cluster range's %d and at most %d", bits, r.Bits(), maxNodePodPrefixLength)
	case bits-r.Bits() > 16:
		return netip.Prefix{}, 0, fmt.Errorf("pod network: cluster range %s holds more than %d node ranges of /%d: take a longer node prefix or a smaller cluster range", r, maxNodePodRanges, bits)
	}
	return r, bits, nil
}

// reservedPodAddresses are the IPv4 addresses no Pod may have, because
// every host already gives them another meaning (itself, its link, a
// group, none at all): a cluster range must overlap none of them, at any
// of its addresses, not only its first. Only IPv4 ranges are supported,
// so there is no IPv6 list.
var reservedPodAddresses = []reservedRange{
	{netip.MustParsePrefix("0.0.0.0/8"), `"this network"`},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved, and the broadcast address"},
}

// reservedRange is a range of addresses no Pod may have, and what they
// are, for the error that refuses a cluster range over them.
type reservedRange struct {
	prefix netip.Prefix
	what   string
}

// reservedOverlap is the first of reservedPodAddresses that r overlaps,
// nil if none.
func reservedOverlap(r netip.Prefix) *reservedRange {
	for i := range reservedPodAddresses {
		if r.Overlaps(reservedPodAddresses[i].prefix) {
			return &reservedPodAddresses[i]
		}
	}
	return nil
}

// withPodNetworkDefaults returns p (nil: the defaults) with its unset
// fields filled in.
func withPodNetworkDefaults(p *cpb.PodNetwork) *cpb.PodNetwork {
	res := &cpb.PodNetwork{ClusterRange: DefaultPodRange.String(), NodePrefixLength: DefaultNodePodPrefixLength}
	if p.GetClusterRange() != "" {
		res.ClusterRange = p.ClusterRange
	}
	if p.GetNodePrefixLength() != 0 {
		res.NodePrefixLength = p.NodePrefixLength
	}
	return res
}

// readPodNetwork reads the cluster's pod network, defaults filled in.
func readPodNetwork(ctx context.Context, kv clientv3.KV) (*cpb.PodNetwork, error) {
	resp, err := kv.Get(ctx, podNetworkKey)
	if err != nil {
		return nil, fmt.Errorf("reading the pod network: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return withPodNetworkDefaults(nil), nil
	}
	var p cpb.PodNetwork
	if err := proto.Unmarshal(resp.Kvs[0].Value, &p); err != nil {
		return nil, fmt.Errorf("parsing the pod network: %w", err)
	}
	if err := CheckPodNetwork(&p); err != nil {
		return nil, fmt.Errorf("the stored %w", err)
	}
	return withPodNetworkDefaults(&p), nil
}

// podRangeKey is the key that says who has range r.
func podRangeKey(r netip.Prefix) string { return podRangePrefix + r.String() }

// PodRangesPrefix is where, in the curator's etcd namespace, the pod
// ranges given out are kept: one key per range, the node's ID its value.
// kube/controller, which gives the Kubernetes Nodes the same ranges, reads
// and watches them there (told by the role server, since it sits below
// the curator).
const PodRangesPrefix = podRangePrefix

// NodesPrefix is where, in the curator's etcd namespace, the node records
// are kept (a cpb.Node under its ID), for kube/controller, which deletes
// the Kubernetes Node of a Polis node whose record is gone.
const NodesPrefix = nodePrefix

// ParsePodRangeKey is the range a key under PodRangesPrefix stands for.
func ParsePodRangeKey(key []byte) (netip.Prefix, bool) {
	s, ok := strings.CutPrefix(string(key), podRangePrefix)
	if !ok {
		return netip.Prefix{}, false
	}
	r, err := netip.ParsePrefix(s)
	return r, err == nil
}

// errPodRangesExhausted is wrapped by choosePodRange when every range is
// given out.
var errPodRangesExhausted = errors.New("no pod range left")

// choosePodRange picks the lowest range of the pod network that no node
// has, and returns it with the transaction parts that give it to node id:
// a condition that nobody took it meanwhile, and the write of its key.
// The caller writes them with the node's record.
func choosePodRange(ctx context.Context, kv clientv3.KV, id string) (netip.Prefix, clientv3.Cmp, clientv3.Op, error) {
	pn, err := readPodNetwork(ctx, kv)
	if err != nil {
		return netip.Prefix{}, clientv3.Cmp{}, clientv3.Op{}, err
	}
	cluster, bits, err := parsePodNetwork(pn)
	if err != nil {
		return netip.Prefix{}, clientv3.Cmp{}, clientv3.Op{}, err
	}
	resp, err := kv.Get(ctx, podRangePrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return netip.Prefix{}, clientv3.Cmp{}, clientv3.Op{}, fmt.Errorf("reading the pod ranges given out: %w", err)
	}
	taken := make(map[string]bool, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		taken[string(kv.Key)] = true
	}
	base := binary.BigEndian.Uint32(cluster.Addr().AsSlice())
	size := uint32(1) << (32 - bits)
	count := 1 << (bits - cluster.Bits())
	for i := range count {
		var a [4]byte
		binary.BigEndian.PutUint32(a[:], base+uint32(i)*size)
		r := netip.PrefixFrom(netip.AddrFrom4(a), bits)
		key := podRangeKey(r)
		if taken[key] {
			continue
		}
		return r, clientv3.Compare(clientv3.CreateRevision(key), "=", 0), clientv3.OpPut(key, id), nil
	}
	return netip.Prefix{}, clientv3.Cmp{}, clientv3.Op{}, fmt.Errorf("%w: all %d node ranges of /%d in the cluster pod range %s are given out, and a node gives its range back only when its record is deleted: decommission and delete nodes that no longer run, and UP nodes that hold neither KubernetesWorker nor KubernetesController any more and need no range", errPodRangesExhausted, count, bits, cluster)
}

// needsPodRange says whether a node holding roles needs a pod range of
// its own: it holds KubernetesWorker (its Pods' addresses) or
// KubernetesController (its apiserver's address on the pod network).
func needsPodRange(roles *cpb.Roles) bool {
	return roles.GetKubernetesWorker() != nil || roles.GetKubernetesController() != nil
}

// givePodRange is the part of a change to node n's record that gives it a
// pod range if it needs one (needsPodRange) and has none: n gets the
// range, and the returned condition and write go into the same
// transaction. A node that has a range, or holds neither role, is left as
// it is. An empty pool refuses a worker, whose Pods need addresses, but
// not a controller: its control plane must not wait for a pod range, and
// without one it runs all the same, its apiserver reaching no Pod (its
// status says so) until the sweep of a later leader term gives it a
// freed range.
func givePodRange(ctx context.Context, kv clientv3.KV, n *cpb.Node) ([]clientv3.Cmp, []clientv3.Op, error) {
	if !needsPodRange(n.GetRoles()) || n.GetNetwork().GetPodRange() != "" {
		return nil, nil, nil
	}
	r, cmp, op, err := choosePodRange(ctx, kv, n.Id)
	if errors.Is(err, errPodRangesExhausted) && n.GetRoles().GetKubernetesWorker() == nil {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, podRangeError(n.Id, err)
	}
	if n.Network == nil {
		n.Network = &cpb.NodeNetwork{}
	}
	n.Network.PodRange = r.String()
	return []clientv3.Cmp{cmp}, []clientv3.Op{op}, nil
}

// checkPodRangeLeft refuses, with givePodRange's error, a change that
// would give node n (its record as it is) the roles roles, among them
// KubernetesWorker, while n has no pod range and none is left (a
// controller is given its role without one: givePodRange). It writes
// nothing: it is for a change that must be refused before it touches
// what no transaction with the record spans (etcd's membership, in
// UpdateNodeRoles); the write itself gives the range. The caller holds
// l.membership from this check to that write, and so does every change
// that gives a range (UpdateNodeRoles, the sweep), so within the term
// nothing takes the range meanwhile; a deposed leader's writes fail on
// their leadership condition. Only an operator's hand in etcd can still
// empty the pool in between, and then the write is refused as here.
func checkPodRangeLeft(ctx context.Context, kv clientv3.KV, n *cpb.Node, roles *cpb.Roles) error {
	if roles.GetKubernetesWorker() == nil || n.GetNetwork().GetPodRange() != "" {
		return nil
	}
	_, _, _, err := choosePodRange(ctx, kv, n.Id)
	if err != nil {
		return podRangeError(n.Id, err)
	}
	return nil
}

// podRangeError is choosePodRange's error err for node id as the reply to
// a request: an empty pool is the request's refusal (ResourceExhausted),
// anything else a failure to read the store, returned as it is.
func podRangeError(id string, err error) error {
	if errors.Is(err, errPodRangesExhausted) {
		return status.Errorf(codes.ResourceExhausted, "node %s: %v", id, err)
	}
	return err
}

// releasePodRangeOp returns the pod range of n to the pool, for the
// transaction that deletes n's record: the range's key is deleted if it
// still names n (a nested transaction, so a key that somehow names another
// node is left to it). No op if n has no range.
func releasePodRangeOp(n *cpb.Node) (clientv3.Op, bool) {
	r, err := netip.ParsePrefix(n.GetNetwork().GetPodRange())
	if err != nil {
		return clientv3.Op{}, false
	}
	key := podRangeKey(r)
	return clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Value(key), "=", n.Id)}, []clientv3.Op{clientv3.OpDelete(key)}, nil), true
}

// checkNodeNetwork checks the network part of a node record.
func checkNodeNetwork(nn *cpb.NodeNetwork) error {
	if nn == nil {
		return nil
	}
	if nn.PodRange != "" {
		r, err := netip.ParsePrefix(nn.PodRange)
		if err != nil || !r.Addr().Is4() || r.Masked() != r {
			return fmt.Errorf("pod range %s is not an IPv4 prefix without host bits", quoted(nn.PodRange))
		}
	}
	if k := nn.WireguardPublicKey; len(k) != 0 && len(k) != wireGuardKeySize {
		return fmt.Errorf("WireGuard public key is %d bytes, not %d", len(k), wireGuardKeySize)
	}
	return nil
}

// wireGuardKeySize is the size of a WireGuard (Curve25519) key.
const wireGuardKeySize = 32

// podRangesTimeout bounds one term's look for nodes without a range.
const podRangesTimeout = time.Minute

// runPodRanges gives, once per leader term, a pod range to every node
// that needs one (needsPodRange) and has none: a record written before
// pod ranges existed, or before controllers got them (an upgraded
// cluster), or by hand. UpdateNodeRoles gives the range with the role, so
// this finds nothing in a cluster that always had them. A pool with no
// range left is logged, not retried: the node waits for its range, and
// says so in its status.
//
//	reads:  s.leader, node records
//	writes: node records' pod ranges, podRangePrefix
func (s *Service) runPodRanges(ctx context.Context) error {
	return s.oncePerTerm(ctx, podRangesTimeout, "giving pod ranges to Kubernetes nodes without one", s.givePodRanges)
}

func (s *Service) givePodRanges(ctx context.Context, l *leaderState) error {
	snap, err := s.nodes.fenced(ctx)
	if err != nil {
		return err
	}
	log := supervisor.Logger(ctx)
	for id, n := range snap.nodes {
		if !needsPodRange(n.GetRoles()) || n.GetNetwork().GetPodRange() != "" {
			continue
		}
		// No lock makes this safe: a role change that gives no range
		// (changeNodeConfirmed) takes none, and another curator shares
		// none. The compare-and-swaps do: the record is written only if
		// unchanged since it was read, and the range only if its key was
		// never created (givePodRange), so whichever write loses reads
		// again and plans again (updateNodeTxn), and a range is never
		// given twice nor a role lost. l.membership is held, as by every
		// change that gives a range, to stay out of a ConsensusMember
		// change between its check for a free range (checkPodRangeLeft)
		// and its record's write, which would otherwise find the pool
		// emptied after etcd's membership changed.
		l.membership.Lock()
		next, err := updateNodeTxn(ctx, l.leadership, s.cfg.Client, id, func(n *cpb.Node) (*cpb.Node, []clientv3.Cmp, []clientv3.Op, error) {
			if n == nil {
				return nil, nil, nil, nil
			}
			cmps, ops, err := givePodRange(ctx, s.cfg.Client, n)
			return n, cmps, ops, err
		})
		l.membership.Unlock()
		if status.Code(err) == codes.ResourceExhausted {
			log.Error("a Kubernetes node has no pod range, and none is left", zap.String("node", id), zap.Error(err))
			continue
		}
		if err != nil {
			return err
		}
		if next != nil {
			log.Info("gave a Kubernetes node without one a pod range", zap.String("node", id), zap.String("podRange", next.GetNetwork().GetPodRange()))
		}
	}
	return nil
}
