package launch

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
	nodev1 "github.com/polis-os/polis/api/node/v1"
	"github.com/polis-os/polis/curator"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/launch/image"
	"github.com/polis-os/polis/localstorage"
	"github.com/polis-os/polis/nodeapi"
	"github.com/polis-os/polis/ownerdir"
	"github.com/polis-os/polis/roleserve"
)

// DefaultFirstAddress is the first node's address when Options.Addresses
// is empty; node i gets the i-th address from it.
var DefaultFirstAddress = netip.MustParseAddr("127.77.0.1")

// Options describe a cluster to launch. The zero value launches three nodes
// with one consensus member (the first) on 127.77.0.1–3, in a temporary
// directory that Close removes, building polis-node from source.
type Options struct {
	// Nodes is how many nodes to start; 0 means 3.
	Nodes int
	// ConsensusMembers makes every node a consensus member (as soon as it
	// is UP, as far as the curator admits joining members at once), so
	// that the control plane survives the loss of any one node. Off, only the first node runs consensus and the curator.
	// polis-launch turns it on by default; tests that exercise adding the
	// role themselves leave it off.
	ConsensusMembers bool
	// BaseDir holds everything: node directories, logs, the node binary
	// when built, and polisctl's configuration. Empty means a new temporary
	// directory.
	BaseDir string
	// Keep leaves BaseDir in place at Close; otherwise Close removes it.
	Keep bool
	// ConfigDir is the polisctl configuration directory to save the
	// owner's credentials in; it must not hold another cluster's. Empty
	// means BaseDir/polisctl.
	ConfigDir string
	// Addresses are the nodes' addresses, one per node; empty means
	// consecutive addresses from DefaultFirstAddress.
	Addresses []netip.Addr
	// ConsensusPort and CuratorPort are every node's ports; 0 means the
	// roleserve defaults.
	ConsensusPort, CuratorPort uint16
	// NodeBinary is the polis-node executable. Empty means a polis-node
	// next to the running executable if there is one, else one built with
	// "go build" into BaseDir (which needs the working directory inside
	// the Polis module).
	NodeBinary string
	// LeaseTTL and HeartbeatInterval are passed to every node (tests
	// shorten them); 0 means the curator's defaults.
	LeaseTTL, HeartbeatInterval time.Duration
	// ConsensusHeartbeat and ConsensusElectionTimeout are every consensus
	// member's raft timings (polis-node --consensus-heartbeat and
	// --consensus-election-timeout); 0 means etcd's defaults (100ms, 1s),
	// except for VMs under TCG, which get TCGConsensusHeartbeat and
	// TCGConsensusElectionTimeout.
	ConsensusHeartbeat, ConsensusElectionTimeout time.Duration
	// LogFormat is the nodes' log format, "console" (the default) or
	// "json".
	LogFormat string
	// StepTimeout bounds each step (a node's curator serving, a node
	// registering, becoming UP, ...); 0 means two minutes, enough for a
	// slow machine.
	StepTimeout time.Duration
	// StopTimeout is how long Close waits for a node to stop after SIGTERM
	// before it kills it; 0 means 15 seconds.
	StopTimeout time.Duration
	// Progress receives a line for every step; nil discards them.
	Progress io.Writer
	// VM, when set, launches qemu VMs booting the node image instead of
	// processes (vmnode.go); Addresses then default to VM.Network's.
	VM *VMOptions
	// Kubernetes runs Kubernetes in the cluster (kubernetes.go): every
	// node gets the bundle, the first node KubernetesController, and
	// Launch returns once its apiserver is ready. With VM, the bundle and
	// the container runtime come on the system disk (VMOptions.SystemDir,
	// built by launch/systembuild when empty), every other node gets
	// KubernetesWorker, and Launch also waits for their Nodes to be
	// Ready. Off, no node holds a Kubernetes role and the bundle is not
	// built.
	Kubernetes bool
	// Images are served to the nodes from a registry inside the launcher
	// (registry.go); VM clusters with Kubernetes only.
	Images []Image
	// KubernetesBundle is the polis-kube binary for Kubernetes; empty
	// means one next to the running executable, else the one kube/bundle
	// builds (a quarter of an hour the first time, seconds after).
	KubernetesBundle string
	// PodRange is the cluster's pod range, out of which each worker node
	// gets a range of PodNodePrefixLength; the zero Prefix and 0 mean the
	// curator's defaults (curator.DefaultPodRange, a /24 each). It must
	// not overlap the nodes' addresses (the VM network).
	PodRange            netip.Prefix
	PodNodePrefixLength int
	// RestoreBackup, when set, restores a cluster from this backup file
	// (polisctl cluster backup) instead of bootstrapping one
	// (restore.go): ConfigDir must be the polisctl configuration of the
	// cluster it was taken from, whose owner key decrypts it. Process
	// nodes only.
	RestoreBackup string
}

func (o *Options) setDefaults() error {
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	if o.Nodes < 1 || o.Nodes > 200 {
		return fmt.Errorf("launch: %d nodes: want 1 to 200", o.Nodes)
	}
	if o.VM != nil {
		if err := o.VM.setDefaults(); err != nil {
			return err
		}
	}
	if len(o.Addresses) == 0 && o.VM != nil {
		var err error
		if o.Addresses, err = vmAddresses(o.VM.Network, o.Nodes); err != nil {
			return err
		}
	}
	if len(o.Addresses) == 0 {
		a := DefaultFirstAddress
		for range o.Nodes {
			o.Addresses = append(o.Addresses, a)
			a = a.Next()
		}
	}
	if len(o.Addresses) != o.Nodes {
		return fmt.Errorf("launch: %d addresses for %d nodes", len(o.Addresses), o.Nodes)
	}
	seen := map[netip.Addr]bool{}
	for _, a := range o.Addresses {
		if !a.IsValid() || a.IsUnspecified() {
			return fmt.Errorf("launch: address %v: want one a node can be reached on", a)
		}
		if seen[a] {
			return fmt.Errorf("launch: address %v given twice: every node needs its own", a)
		}
		seen[a] = true
	}
	if o.ConsensusPort == 0 {
		o.ConsensusPort = roleserve.DefaultConsensusPort
	}
	if o.CuratorPort == 0 {
		o.CuratorPort = roleserve.DefaultCuratorPort
	}
	if o.ConsensusPort == o.CuratorPort {
		return fmt.Errorf("launch: consensus and curator port are both %d", o.CuratorPort)
	}
	switch o.LogFormat {
	case "":
		o.LogFormat = "console"
	case "console", "json":
	default:
		return fmt.Errorf("launch: log format %q: want console or json", o.LogFormat)
	}
	if o.StepTimeout == 0 {
		o.StepTimeout = 2 * time.Minute
	}
	if o.StopTimeout == 0 {
		o.StopTimeout = 15 * time.Second
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if err := o.checkPodNetwork(); err != nil {
		return err
	}
	if len(o.Images) > 0 && (o.VM == nil || !o.Kubernetes) {
		return errors.New("launch: images (Options.Images) are served to the nodes of a VM cluster with Kubernetes only")
	}
	return nil
}

// podNetwork is the pod network the first node bootstraps with; nil for
// the curator's defaults.
func (o *Options) podNetwork() *cpb.PodNetwork {
	if !o.PodRange.IsValid() && o.PodNodePrefixLength == 0 {
		return nil
	}
	p := &cpb.PodNetwork{NodePrefixLength: uint32(o.PodNodePrefixLength)}
	if o.PodRange.IsValid() {
		p.ClusterRange = o.PodRange.String()
	}
	return p
}

// checkPodNetwork refuses a pod network the curator would refuse, or one
// over the nodes' own addresses, whose traffic would be routed to Pods.
func (o *Options) checkPodNetwork() error {
	if o.PodNodePrefixLength < 0 {
		return fmt.Errorf("launch: pod node prefix length %d is negative", o.PodNodePrefixLength)
	}
	if err := curator.CheckPodNetwork(o.podNetwork()); err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	r := o.PodRange
	if !r.IsValid() {
		r = curator.DefaultPodRange
	}
	if o.VM != nil && r.Overlaps(o.VM.Network) {
		return fmt.Errorf("launch: pod range %s overlaps the VM network %s", r, o.VM.Network)
	}
	for _, a := range o.Addresses {
		if r.Contains(a) {
			return fmt.Errorf("launch: pod range %s holds node address %s", r, a)
		}
	}
	return nil
}

// Cluster is a launched cluster. Close it to stop its nodes.
type Cluster struct {
	// BaseDir and ConfigDir are the directories of Options, as used.
	BaseDir, ConfigDir string
	// Nodes are the cluster's nodes in order; Nodes[0] bootstrapped it.
	Nodes []*Node

	opts      Options
	removeDir bool
	progMu    sync.Mutex
	closeOnce sync.Once
	closeErr  error
	connMu    sync.Mutex
	conn      *grpc.ClientConn
	ownerKey  ed25519.PrivateKey
	vmnet     *vmNetwork
	registry  *imageRegistry
	img       *image.Image // a VM cluster's node image, for AddNodes
}

// Launch starts a cluster and returns once every node is UP and healthy
// (and, with ConsensusMembers, runs a curator). It reports each step to
// Options.Progress. On error, and when ctx ends first, it stops whatever it
// started before returning.
func Launch(ctx context.Context, opts Options) (_ *Cluster, err error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	if err := refuseKeptDir(opts.BaseDir); err != nil {
		return nil, err
	}
	if err := opts.checkRestore(); err != nil {
		return nil, err
	}
	c := &Cluster{opts: opts, BaseDir: opts.BaseDir, ConfigDir: opts.ConfigDir}
	if opts.VM == nil {
		if err := checkPortsFree(opts.Addresses, &opts); err != nil {
			return nil, err
		}
	}
	if c.BaseDir == "" {
		if c.BaseDir, err = os.MkdirTemp("", "polis-launch-"); err != nil {
			return nil, fmt.Errorf("launch: %w", err)
		}
	} else if err := os.MkdirAll(c.BaseDir, 0o755); err != nil {
		return nil, fmt.Errorf("launch: %w", err)
	}
	c.removeDir = !opts.Keep
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	if c.BaseDir, err = filepath.Abs(c.BaseDir); err != nil {
		return nil, err
	}
	if c.ConfigDir == "" {
		c.ConfigDir = filepath.Join(c.BaseDir, "polisctl")
	}
	if _, err := os.Stat(filepath.Join(c.ConfigDir, "ca.der")); err == nil && opts.RestoreBackup == "" {
		return nil, fmt.Errorf("launch: %s already holds the credentials of a cluster; choose another polisctl configuration directory or remove that one", c.ConfigDir)
	}
	c.progress("base directory %s", c.BaseDir)

	if opts.VM != nil {
		if opts.Kubernetes {
			if err := c.kubernetesSystem(ctx); err != nil {
				return nil, err
			}
		}
		if err := c.launchVMs(ctx); err != nil {
			return nil, err
		}
		return c, nil
	}
	bin, err := c.nodeBinary(ctx)
	if err != nil {
		return nil, err
	}
	if opts.Kubernetes {
		if opts.KubernetesBundle, err = c.kubernetesBundle(ctx); err != nil {
			return nil, err
		}
		c.opts.KubernetesBundle = opts.KubernetesBundle
	}
	for i, a := range opts.Addresses {
		n := &Node{Index: i + 1, Address: a, Dir: filepath.Join(c.BaseDir, "node"+strconv.Itoa(i+1)), binary: bin, report: c.progress}
		n.Log = filepath.Join(c.BaseDir, fmt.Sprintf("node%d.log", n.Index))
		n.args = nodeArgs(n, &opts)
		if err := os.MkdirAll(n.Dir, 0o700); err != nil {
			return nil, fmt.Errorf("launch: %w", err)
		}
		c.Nodes = append(c.Nodes, n)
	}
	if err := c.form(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// refuseKeptDir refuses a base directory that already holds nodes (a
// cluster kept with Keep): the launcher forms new clusters only, and its
// first node, finding storage, would rejoin the old cluster instead of
// bootstrapping while the launcher waited for a new one.
func refuseKeptDir(dir string) error {
	if dir == "" {
		return nil
	}
	nodes, err := filepath.Glob(filepath.Join(dir, "node[0-9]*"))
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if st, err := os.Stat(n); err == nil && st.IsDir() {
			return fmt.Errorf("launch: %s holds the nodes of a cluster launched before (kept with --keep; %s is one): the launcher forms new clusters only. Choose another --dir, remove this one, or start the kept nodes by hand from their storage (polis-node --storage %s --address IP, with the address the node had)",
				dir, n, filepath.Join(n, "storage"))
		}
	}
	return nil
}

// form starts every node at once, bootstraps the cluster on the first
// and adds the others. A cluster restored from a backup is formed in
// turns instead: its register ticket is the backup's, which the launcher
// learns only once the restored node serves, so the others start then.
func (c *Cluster) form(ctx context.Context) error {
	if c.opts.RestoreBackup != "" {
		if err := c.restore(ctx); err != nil {
			return err
		}
		if err := c.startRegistering(ctx, c.Nodes[1:]); err != nil {
			return err
		}
	} else {
		if err := c.startAll(); err != nil {
			return err
		}
		if err := c.bootstrap(ctx); err != nil {
			return err
		}
	}
	if err := c.addNodes(ctx); err != nil {
		return err
	}
	if c.opts.ConsensusMembers && len(c.Nodes) > 1 {
		if err := c.refreshCurators(ctx); err != nil {
			return err
		}
	}
	if c.opts.Kubernetes {
		if err := c.startKubernetes(ctx); err != nil {
			return err
		}
	}
	c.progress("cluster ready: %d nodes, all UP and healthy", len(c.Nodes))
	return nil
}

// progress reports one step.
func (c *Cluster) progress(format string, args ...any) {
	c.progMu.Lock()
	defer c.progMu.Unlock()
	fmt.Fprintf(c.opts.Progress, format+"\n", args...)
}

// checkPortsFree fails when any of the nodes' ports at addrs is taken,
// most likely by another cluster on the same addresses, which the new
// nodes would otherwise try to talk to.
func checkPortsFree(addrs []netip.Addr, o *Options) error {
	for _, a := range addrs {
		for _, p := range []uint16{o.ConsensusPort, o.CuratorPort, nodeapi.DefaultPort, nodeapi.DefaultMetricsPort} {
			ap := netip.AddrPortFrom(a, p)
			l, err := net.Listen("tcp", ap.String())
			if err != nil {
				return fmt.Errorf("launch: %v is not free (%w): is another cluster running on these addresses? Stop it, or choose other addresses", ap, err)
			}
			l.Close()
		}
	}
	return nil
}

// startAll writes every node's parameters and starts them all at once, so
// that their boots overlap (a VM's kernel takes seconds): the first
// bootstraps the cluster with a register ticket the launcher chose, and
// the others register with that ticket through the first node's curator,
// waiting for it to serve. Their parameters cannot carry the cluster's CA
// certificate, which the first node makes as it bootstraps: a joining
// node learns it from the first node's curator, which proves it knows the
// ticket (node: enrolment.learnCA). The ticket is made as the curator
// makes its own (curator.NewRegisterTicket), kept in the parameters files
// (secret) until each node is UP, and the owner may rotate it as any
// other.
func (c *Cluster) startAll() error {
	ownerKey, err := identity.GenerateKey()
	if err != nil {
		return err
	}
	c.ownerKey = ownerKey
	ticket, err := curator.NewRegisterTicket()
	if err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	first := c.Nodes[0]
	if err := writeParameters(first, &nodev1.NodeParameters{Cluster: &nodev1.NodeParameters_ClusterBootstrap{
		ClusterBootstrap: &nodev1.ClusterBootstrap{
			OwnerPublicKey:              ownerKey.Public().(ed25519.PublicKey),
			InitialClusterConfiguration: &nodev1.ClusterConfiguration{PodNetwork: c.opts.podNetwork()},
			RegisterTicket:              ticket,
		},
	}}); err != nil {
		return err
	}
	register := &nodev1.NodeParameters{Cluster: &nodev1.NodeParameters_ClusterRegister{ClusterRegister: &nodev1.ClusterRegister{
		RegisterTicket: ticket,
		ClusterDirectory: &cpb.ClusterDirectory{Curators: []*cpb.CuratorEndpoint{
			{Address: first.Address.String(), Port: uint32(c.opts.CuratorPort)},
		}},
	}}}
	for _, n := range c.Nodes[1:] {
		if err := writeParameters(n, register); err != nil {
			return err
		}
	}
	for _, n := range c.Nodes {
		if err := c.StartNode(n); err != nil {
			return err
		}
	}
	return nil
}

// bootstrap waits for the first node to make the cluster and takes
// ownership of it.
func (c *Cluster) bootstrap(ctx context.Context) error {
	first, ownerKey := c.Nodes[0], c.ownerKey
	cur := netip.AddrPortFrom(first.Address, c.opts.CuratorPort)
	// The curator's port opens once the node has bootstrapped; taking
	// ownership is retried until then, and every attempt is bounded so a
	// node that never answers is reported, not waited for forever.
	err := c.poll(ctx, first.String()+": curator serving", func(ctx context.Context) (bool, error) {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return ownershipTaken(ownerdir.TakeOwnership(actx, c.ConfigDir, []netip.AddrPort{cur}, ownerKey, func(fp string) bool {
			// We made this cluster a moment ago, on an address we just
			// found free: the CA it presents is its own.
			c.progress("owner: the cluster CA's SHA-256 fingerprint is %s", fp)
			return true
		}))
	})
	if err != nil {
		return err
	}
	c.progress("%v: curator serving", first)
	c.progress("owner: took ownership; polisctl configuration in %s", c.ConfigDir)
	if c.conn, err = ownerdir.Dial(c.ConfigDir); err != nil {
		return fmt.Errorf("launch: connecting as the owner: %w", err)
	}
	// The others may have registered already: the first node is the one
	// at its address.
	err = c.poll(ctx, first.String()+": UP and healthy", func(ctx context.Context) (bool, error) {
		rec, err := c.nodeByAddress(ctx, first.Address)
		if err != nil || rec == nil {
			return false, nil
		}
		first.setID(rec.Id)
		return healthyUp(rec), nil
	})
	if err != nil {
		return err
	}
	return forgetParameters(first)
}

// addNodes takes every node but the first (started with the first, see
// startAll) through its steps as soon as it is ready for them,
// independently of the others: registered, approved, UP and healthy, and
// (with ConsensusMembers) given the consensus member role and running a
// curator. The curator refuses a joining member while too many others
// are still learners, so a node's role is retried meanwhile; the nodes
// still booting lose no time.
func (c *Cluster) addNodes(ctx context.Context) error {
	if len(c.Nodes) == 1 {
		return nil
	}
	mgmt := cpb.NewManagementServiceClient(c.Conn())
	g, gctx := errgroup.WithContext(ctx)
	for _, n := range c.Nodes[1:] {
		g.Go(func() error { return c.addNode(gctx, mgmt, n) })
	}
	return g.Wait()
}

// addNode takes a started node through addNodes' steps (admit,
// addnodes.go).
func (c *Cluster) addNode(ctx context.Context, mgmt cpb.ManagementServiceClient, n *Node) error {
	return c.admit(ctx, mgmt, n, c.opts.ConsensusMembers)
}

// MakeConsensusMember gives n the ConsensusMember role and waits until it
// runs a curator and is healthy. The curator admits one joining member at
// a time, so a refusal because another is still catching up is retried.
func (c *Cluster) MakeConsensusMember(ctx context.Context, n *Node) error {
	if err := c.makeConsensusMember(ctx, n); err != nil {
		return err
	}
	return c.refreshCurators(ctx)
}

// makeConsensusMember is MakeConsensusMember but for refreshing the
// curators polisctl knows, which the caller does once it has added all
// the members it adds.
func (c *Cluster) makeConsensusMember(ctx context.Context, n *Node) error {
	mgmt := cpb.NewManagementServiceClient(c.Conn())
	yes := true
	err := c.poll(ctx, n.String()+": given the consensus member role", func(ctx context.Context) (bool, error) {
		_, err := mgmt.UpdateNodeRoles(ctx, &cpb.UpdateNodeRolesRequest{NodeId: n.ID(), ConsensusMember: &yes})
		switch status.Code(err) {
		case codes.OK:
			return true, nil
		case codes.FailedPrecondition, codes.Unavailable, codes.DeadlineExceeded:
			return false, nil
		default:
			return false, fmt.Errorf("launch: giving %v the consensus member role: %w", n, err)
		}
	})
	if err != nil {
		return err
	}
	err = c.poll(ctx, n.String()+": curator serving", func(ctx context.Context) (bool, error) {
		rec, err := c.node(ctx, n.ID())
		if err != nil || rec == nil {
			return false, nil
		}
		return healthyUp(rec) && rec.Status.GetRunningCurator() != nil, nil
	})
	if err != nil {
		return err
	}
	c.progress("%v: consensus member, curator serving", n)
	return nil
}

// ownershipTaken is the verdict on one attempt of TakeOwnership for poll:
// a curator that does not answer yet is worth asking again, but a CA other
// than the one polisctl's configuration pins (a stale configuration against
// a new cluster) will not change by waiting, and is reported at once.
func ownershipTaken(err error) (bool, error) {
	var mismatch *ownerdir.CAMismatchError
	if errors.As(err, &mismatch) {
		return false, fmt.Errorf("launch: taking ownership: %w", err)
	}
	return err == nil, nil
}

// refreshCurators takes ownership again, which rewrites the curators in
// polisctl's configuration with those the cluster lists now (as polisctl
// cluster info does): the owner must still reach the cluster when the
// first node is down.
func (c *Cluster) refreshCurators(ctx context.Context) error {
	var curators []netip.AddrPort
	for _, n := range c.Nodes {
		if n.Running() {
			curators = append(curators, netip.AddrPortFrom(n.Address, c.opts.CuratorPort))
		}
	}
	err := c.poll(ctx, "refreshing the curators polisctl knows", func(ctx context.Context) (bool, error) {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		// The CA is pinned by now: trust is never asked.
		return ownershipTaken(ownerdir.TakeOwnership(actx, c.ConfigDir, curators, c.ownerKey, nil))
	})
	if err != nil {
		return err
	}
	// The launcher's own connection knows the curators it was dialled
	// with; give it the new list too.
	conn, err := ownerdir.Dial(c.ConfigDir)
	if err != nil {
		return fmt.Errorf("launch: connecting as the owner: %w", err)
	}
	c.connMu.Lock()
	old := c.conn
	c.conn = conn
	c.connMu.Unlock()
	return old.Close()
}

// StartNode starts a node's process (again) and reports it.
func (c *Cluster) StartNode(n *Node) error {
	if err := n.Start(); err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	c.progress("%v: started (pid %d, log %s)", n, n.PID(), n.Log)
	return nil
}

// WaitHealthy waits until the curator lists n as UP and healthy.
func (c *Cluster) WaitHealthy(ctx context.Context, n *Node) error {
	return c.poll(ctx, n.String()+": UP and healthy", func(ctx context.Context) (bool, error) {
		rec, err := c.node(ctx, n.ID())
		return err == nil && rec != nil && healthyUp(rec), nil
	})
}

// Conn is the owner's connection to the curator leader, through the
// curators polisctl's configuration listed when the launcher last dialled
// (after the last consensus member it added).
func (c *Cluster) Conn() *grpc.ClientConn {
	c.connMu.Lock()
	defer c.connMu.Unlock()
	return c.conn
}

// ListNodes lists the cluster's nodes as the owner sees them.
func (c *Cluster) ListNodes(ctx context.Context) ([]*cpb.Node, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	stream, err := cpb.NewManagementServiceClient(c.Conn()).ListNodes(ctx, &cpb.ListNodesRequest{})
	if err != nil {
		return nil, err
	}
	var res []*cpb.Node
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return res, nil
		}
		if err != nil {
			return nil, err
		}
		res = append(res, resp.Nodes...)
	}
}

func (c *Cluster) node(ctx context.Context, id string) (*cpb.Node, error) {
	nodes, err := c.ListNodes(ctx)
	for _, n := range nodes {
		if n.Id == id {
			return n, nil
		}
	}
	return nil, err
}

// nodeByAddress returns the record of the node at address a; among
// several (a restored cluster keeps its old nodes' records), one waiting
// for approval, else one that holds ConsensusMember.
func (c *Cluster) nodeByAddress(ctx context.Context, a netip.Addr) (*cpb.Node, error) {
	nodes, err := c.ListNodes(ctx)
	var found *cpb.Node
	for _, n := range nodes {
		if n.Status.GetExternalAddress() != a.String() {
			continue
		}
		if found == nil || n.State == cpb.NodeState_NODE_STATE_NEW || (found.State != cpb.NodeState_NODE_STATE_NEW && n.Roles.GetConsensusMember() != nil) {
			found = n
		}
	}
	return found, err
}

// Leader returns the node whose curator leads, as the curators say. It
// reaches them through the curators saved in polisctl's configuration at
// the time of the call, so it follows what polisctl cluster info saved.
func (c *Cluster) Leader(ctx context.Context) (*Node, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := ownerdir.Dial(c.ConfigDir)
	if err != nil {
		return nil, fmt.Errorf("launch: %w", err)
	}
	defer conn.Close()
	resp, err := cpb.NewCuratorServiceClient(conn).GetLeader(ctx, &cpb.GetLeaderRequest{})
	if err != nil {
		return nil, fmt.Errorf("launch: asking who leads: %w", err)
	}
	for _, n := range c.Nodes {
		if n.ID() == resp.Leader.GetNodeId() {
			return n, nil
		}
	}
	return nil, fmt.Errorf("launch: the leader is %s, which this cluster does not know", resp.Leader.GetNodeId())
}

func healthyUp(n *cpb.Node) bool {
	return n.State == cpb.NodeState_NODE_STATE_UP && n.Health == cpb.NodeHealth_NODE_HEALTH_HEALTHY
}

// poll calls cond every 100ms until it returns true or an error, the step's
// timeout passes, ctx ends, or a node process dies (which no step survives;
// the error then carries the end of that node's log).
func (c *Cluster) poll(ctx context.Context, what string, cond func(context.Context) (bool, error)) error {
	return c.pollWithin(ctx, c.opts.StepTimeout, what, cond)
}

// pollWithin is poll with its own timeout, for the steps that take longer
// than one (Kubernetes in VMs).
func (c *Cluster) pollWithin(ctx context.Context, timeout time.Duration, what string, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		ok, err := cond(ctx)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		for _, n := range c.Nodes {
			if err := n.exitError(); err != nil {
				return fmt.Errorf("launch: waiting for %s: %w", what, err)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("launch: waiting for %s: %w", what, context.Cause(ctx))
		case <-t.C:
		}
	}
}

// Close stops every node (SIGTERM, then SIGKILL after StopTimeout), closes
// the owner's connection and removes BaseDir unless Options.Keep. It is
// safe to call more than once.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() {
		if conn := c.Conn(); conn != nil {
			conn.Close()
		}
		var wg sync.WaitGroup
		errs := make([]error, len(c.Nodes))
		for i, n := range c.Nodes {
			wg.Go(func() { errs[i] = n.Stop(c.opts.StopTimeout) })
		}
		wg.Wait()
		c.closeErr = errors.Join(append(errs, c.closeVMNetwork())...)
		if c.removeDir && c.BaseDir != "" {
			if err := os.RemoveAll(c.BaseDir); err != nil {
				c.closeErr = errors.Join(c.closeErr, err)
			}
		}
	})
	return c.closeErr
}

// parametersFile is the node's parameters file: --parameters of a
// process, the fw_cfg blob of a VM. It is written atomically (a node
// started at any moment reads all of it or none) and secret (it may hold
// the register ticket).
func parametersFile(n *Node) localstorage.File {
	return localstorage.File{Path: filepath.Join(n.Dir, "parameters.pb"), Plain: true, Secret: true}
}

func writeParameters(n *Node, p *nodev1.NodeParameters) error {
	b, err := proto.Marshal(p)
	if err != nil {
		return err
	}
	if err := parametersFile(n).Write(b); err != nil {
		return fmt.Errorf("launch: %v: %w", n, err)
	}
	return nil
}

// forgetParameters removes the node's parameters once it is UP: it has
// forgotten its register ticket itself, and needs only its storage to
// start again, so the launcher's copy (a VM's fw_cfg blob on its next
// boot) goes too.
func forgetParameters(n *Node) error {
	if err := parametersFile(n).Remove(); err != nil {
		return fmt.Errorf("launch: %v: removing its parameters: %w", n, err)
	}
	return nil
}
