package node

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"

	cpb "github.com/polis-os/polis/api/curator/v1"
	nodev1 "github.com/polis-os/polis/api/node/v1"
	"github.com/polis-os/polis/consensus"
	"github.com/polis-os/polis/curator"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/event/memory"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/kube/kubelet"
	"github.com/polis-os/polis/localstorage"
	"github.com/polis-os/polis/logring"
	"github.com/polis-os/polis/node/pid1"
	"github.com/polis-os/polis/nodeapi"
	"github.com/polis-os/polis/roleserve"
	"github.com/polis-os/polis/supervisor"
)

// Version is the node agent's version, reported in the node's status.
// Release builds set it with -ldflags "-X ...node.Version=...".
var Version = "dev"

// Config describes one node agent.
type Config struct {
	// StorageRoot is the directory the node keeps everything under (see
	// localstorage). Required.
	StorageRoot string
	// Address is the node's IP address: its consensus member and curator
	// listen on it and other nodes reach it there. Required. Development
	// setups give every node its own loopback address.
	Address netip.Addr
	// ParametersFile names node parameters on the command line (development);
	// FWCfg is where fw_cfg exposes them (in a VM, FWCfgParametersPath).
	// Both are optional; the ESP is always consulted.
	ParametersFile, FWCfg string
	// Sealer seals the node's configuration; localstorage.Unsealed if nil.
	Sealer localstorage.Sealer
	// DataSealing is how the node keeps its data at rest, as it reports
	// it in its status: the machine's (PID 1 knows), or, if unspecified,
	// software with the default Sealer (a process node's directory is
	// not encrypted: nothing protects it against a copy).
	DataSealing cpb.DataSealing
	// DataDisk is the machine's encrypted data disk, which the agent
	// binds to its cluster while the node runs no consensus member
	// (clusterpart.go); nil for a process node or a plain data disk.
	DataDisk DataDisk
	// ConsensusPort and CuratorPort default to roleserve's defaults.
	ConsensusPort, CuratorPort uint16
	// LeaseTTL and HeartbeatInterval are passed to the curator; zero means
	// its defaults. Tests shorten them.
	LeaseTTL, HeartbeatInterval time.Duration
	// ConsensusHeartbeat and ConsensusElectionTimeout are the consensus
	// member's raft timings; zero means etcd's defaults.
	ConsensusHeartbeat, ConsensusElectionTimeout time.Duration
	// NodeAPIPort is the node API's port and MetricsPort that of its
	// /metrics; zero means nodeapi's defaults.
	NodeAPIPort, MetricsPort uint16
	// LogRing holds the agent's log lines for the node API's Logs; the
	// caller tees its logger into it. Optional.
	LogRing *logring.Ring
	// KubernetesBundle is the absolute path of the Kubernetes bundle
	// (polis-kube, kube/bundle). Empty: the node runs no Kubernetes, and
	// its status says so while it holds KubernetesController.
	KubernetesBundle string
	// KubernetesAPIServerPort is the apiserver's port while the node runs
	// the Kubernetes control plane; zero means 6443 (controlplane's
	// default).
	KubernetesAPIServerPort uint16
	// KubernetesRuntime is the root of the tree that holds the container
	// runtime, laid out as node/pid1's System* paths say below
	// pid1.SystemRoot (bin/, cni/bin/, images/pause.tar): pid1.SystemRoot
	// itself in a VM. Empty: the node runs no kubelet, and its status says
	// so while it holds KubernetesWorker. It needs KubernetesBundle (the
	// bundle holds the kubelet) and cgroup v2.
	KubernetesRuntime string
	// Cgroups is the cgroup v2 tree node/pid1 laid out when the agent is
	// PID 1 of a node image (pid1.CgroupRoot): the control plane's
	// components then run in cgroups of their own (kube-controlplane/...),
	// and /metrics reports what each of the node's cgroups costs. Empty:
	// neither (a development node, whose host owns the tree).
	Cgroups string
	// KubernetesRegistries maps image registry hosts (as in image
	// references, host:port) to the endpoints containerd pulls from.
	KubernetesRegistries map[string]string
	// Power reboots or powers off the node for the node API; optional
	// (without it the node API refuses both).
	Power nodeapi.PowerFunc
	// RecoverConsensus recovers a cluster that lost the quorum of its
	// consensus members on this node, a survivor: before anything
	// starts, its stopped member is prepared to restart as the single
	// member of the cluster with all its data (consensus.PrepareRecovery,
	// which refuses while another member answers). Once per agent.
	RecoverConsensus bool
	// Restore, on fresh storage, makes this node the single consensus
	// member of a cluster restored from a backup or snapshot (restore.go):
	// before anything starts, its member is made from the snapshot's
	// data, refused on storage that holds a node. Once per storage.
	Restore *RestoreSource
}

// Node is a node agent. Make it with New and run it with Run under a
// supervisor.
type Node struct {
	cfg    Config
	root   *localstorage.Root
	values *roleserve.Values
	bootID string
	// renewAt says when the node certificate is due for renewal; tests
	// replace it to renew at once.
	renewAt func(*x509.Certificate) time.Time
	// apiRenewAt says when the node API certificate is due for renewal;
	// tests replace it to renew at once.
	apiRenewAt func(*x509.Certificate) time.Time
	// apiCertificate is the node API's serving certificate, kept by the
	// nodeAPICertificate worker; it lives outside the role-server values
	// because only nodeapi reads it.
	apiCertificate memory.Value[*x509.Certificate]
	// recovered is set once RecoverConsensus was carried out, so that a
	// restart of Run does not force a new cluster again.
	recovered bool
	// restorePrepared is set once Restore was carried out.
	restorePrepared bool
}

// New validates cfg and lays out the storage root.
func New(cfg Config) (*Node, error) {
	if cfg.StorageRoot == "" {
		return nil, errors.New("node config: StorageRoot is required")
	}
	if !cfg.Address.IsValid() || cfg.Address.IsUnspecified() {
		return nil, fmt.Errorf("node config: Address %v: a node needs the IP address other nodes reach it on", cfg.Address)
	}
	if cfg.KubernetesBundle != "" && !filepath.IsAbs(cfg.KubernetesBundle) {
		return nil, fmt.Errorf("node config: KubernetesBundle %q is not an absolute path", cfg.KubernetesBundle)
	}
	if cfg.KubernetesRuntime != "" && !filepath.IsAbs(cfg.KubernetesRuntime) {
		return nil, fmt.Errorf("node config: KubernetesRuntime %q is not an absolute path", cfg.KubernetesRuntime)
	}
	if r := cfg.Restore; r != nil {
		switch {
		case (r.Backup == "") == (r.Snapshot == ""):
			return nil, errors.New("node config: Restore needs one of a backup and a snapshot")
		case r.Backup != "" && len(r.OwnerKey) != ed25519.PrivateKeySize:
			return nil, errors.New("node config: restoring a backup needs the owner key to decrypt it")
		case cfg.RecoverConsensus:
			return nil, errors.New("node config: a node either recovers the cluster on its own consensus data or restores it onto fresh storage, not both")
		}
	}
	if cfg.Sealer == nil {
		cfg.Sealer = localstorage.Unsealed{}
		if cfg.DataSealing == cpb.DataSealing_DATA_SEALING_UNSPECIFIED {
			cfg.DataSealing = cpb.DataSealing_DATA_SEALING_SOFTWARE
		}
	}
	root, err := localstorage.New(cfg.StorageRoot)
	if err != nil {
		return nil, fmt.Errorf("node config: %w", err)
	}
	// A boot ID per start of the agent: in development a restarted process
	// is a rebooted node, and other nodes should see it as one.
	id := make([]byte, 16)
	if _, err := rand.Read(id); err != nil {
		return nil, err
	}
	return &Node{cfg: cfg, root: root, values: roleserve.NewValues(), bootID: hex.EncodeToString(id), renewAt: identity.RenewAt, apiRenewAt: identity.RenewAt}, nil
}

// Preflight checks, before the agent runs, what would make every run of it
// fail the same way, so that a command exits with the error instead of
// a supervisor retrying it forever: a node that has not enrolled yet needs
// node parameters that exist and parse. A --parameters file that was named
// but is missing is an error here, not "no parameters found".
func (n *Node) Preflight() error {
	if n.cfg.Restore != nil {
		// Restored, not bootstrapped nor registered: no parameters.
		return nil
	}
	if restored, err := n.restored(); restored || err != nil {
		return err
	}
	if _, err := readSealedConfiguration(n.root, n.cfg.Sealer); !errors.Is(err, fs.ErrNotExist) {
		// Enrolled (the parameters are not needed), or a problem Run
		// reports with its own advice.
		return nil
	}
	if f := n.cfg.ParametersFile; f != "" {
		if _, err := os.Stat(f); errors.Is(err, fs.ErrNotExist) {
			if _, err := n.root.ESP.NodeParameters.Read(); err != nil {
				return fmt.Errorf("the node parameters file %s does not exist, and the node has not enrolled yet: it needs parameters to bootstrap or register (polisctl ticket --parameters)", f)
			}
		}
	}
	if _, _, err := LoadParameters(ParameterSources{FWCfg: n.cfg.FWCfg, ESP: n.root.ESP.NodeParameters, File: n.cfg.ParametersFile}); err != nil {
		return err
	}
	return nil
}

// Values are the node's role-server values, for status pages and tests.
func (n *Node) Values() *roleserve.Values { return n.values }

// APICertificate is the node API certificate the node serves its API and
// /metrics with, once the curator has issued it (nil until then); for
// tests and status pages.
func (n *Node) APICertificate() event.ValueWatch[*x509.Certificate] { return &n.apiCertificate }

// Run enrols the node (if it has not) and runs its role server until ctx is
// cancelled.
func (n *Node) Run(ctx context.Context) error {
	logger := supervisor.Logger(ctx)
	if err := n.root.Create(); err != nil {
		return err
	}
	if err := n.PrepareRecovery(ctx, logger); err != nil {
		return err
	}
	if err := n.PrepareRestore(ctx, logger); err != nil {
		return err
	}
	en := &enrolment{
		root:        n.root,
		sealer:      n.cfg.Sealer,
		now:         time.Now,
		renewAt:     n.renewAt,
		local:       &n.values.LocalControlPlane,
		directory:   &n.values.Directory,
		credentials: &n.values.Credentials,
	}
	cp := roleserve.ControlPlaneConfig{
		Address:           n.cfg.Address,
		ConsensusPort:     n.cfg.ConsensusPort,
		CuratorPort:       n.cfg.CuratorPort,
		EtcdDir:           n.root.Data.Etcd.Path,
		LeaseTTL:          n.cfg.LeaseTTL,
		HeartbeatInterval: n.cfg.HeartbeatInterval,
		RaftHeartbeat:     n.cfg.ConsensusHeartbeat,
		ElectionTimeout:   n.cfg.ConsensusElectionTimeout,
	}

	sealed, err := readSealedConfiguration(n.root, n.cfg.Sealer)
	switch {
	case err == nil:
		// Enrolled before: rejoin with the sealed identity.
		en.key, en.ca, en.enrolled = sealed.key, sealed.ca, true
		if err := n.checkKeyFile(en.key); err != nil {
			return err
		}
		// A crash may have come between the sealed configuration and
		// forgetting the ticket.
		if err := forgetTicket(n.root.ESP.NodeParameters); err != nil {
			return err
		}
		// A control-plane node finds its own curator first; the others the
		// curators they knew.
		if en.localCurator, err = n.restoreRoles(logger); err != nil {
			return err
		}
		en.curators = n.knownCurators(logger, en.ca)
		logger.Info("rejoining the cluster", zap.String("node", identity.NodeID(en.key.Public().(ed25519.PublicKey))), zap.Bool("through_own_curator", en.localCurator), zap.Int("curators_known", len(en.curators)))
	case errors.Is(err, fs.ErrNotExist) && n.restorePending():
		// Restored onto this storage (restore.go) and not enrolled yet:
		// the node's own curator adds it to the restored cluster, as the
		// first node at bootstrap, and it joins through it.
		if en.key, err = n.nodeKey(); err != nil {
			return err
		}
		pub := en.key.Public().(ed25519.PublicKey)
		logger.Info("joining the cluster restored onto this node", zap.String("node", identity.NodeID(pub)))
		cp.Bootstrap = &curator.BootstrapParams{Restored: true, NodeKey: pub, NodeStatus: n.status()}
		en.localCurator = true
	case errors.Is(err, fs.ErrNotExist):
		params, sources, err := LoadParameters(ParameterSources{FWCfg: n.cfg.FWCfg, ESP: n.root.ESP.NodeParameters, File: n.cfg.ParametersFile})
		if err != nil {
			return err
		}
		// Keep the parameters on the ESP: a crash before enrolment ends
		// must not lose them.
		if err := n.root.ESP.NodeParameters.WriteProto(params); err != nil {
			return err
		}
		if en.key, err = n.nodeKey(); err != nil {
			return err
		}
		pub := en.key.Public().(ed25519.PublicKey)
		switch c := params.Cluster.(type) {
		case *nodev1.NodeParameters_ClusterBootstrap:
			logger.Info("bootstrapping a new cluster", zap.String("node", identity.NodeID(pub)), zap.Strings("parameters_from", sources))
			cp.Bootstrap = &curator.BootstrapParams{
				OwnerKey:       c.ClusterBootstrap.OwnerPublicKey,
				NodeKey:        pub,
				NodeStatus:     n.status(),
				SnapshotPolicy: c.ClusterBootstrap.GetInitialClusterConfiguration().GetConsensusSnapshots(),
				PodNetwork:     c.ClusterBootstrap.GetInitialClusterConfiguration().GetPodNetwork(),
				RegisterTicket: c.ClusterBootstrap.GetRegisterTicket(),
			}
			en.localCurator = true
		case *nodev1.NodeParameters_ClusterRegister:
			logger.Info("registering into a cluster", zap.String("node", identity.NodeID(pub)), zap.Strings("parameters_from", sources))
			en.register = c.ClusterRegister
			en.curators = c.ClusterRegister.ClusterDirectory.Curators
			en.status = n.status()
			// Without one, enrolment learns it (enrolment.learnCA).
			if ca := c.ClusterRegister.ClusterDirectory.CaCertificate; len(ca) > 0 {
				if en.ca, err = x509.ParseCertificate(ca); err != nil {
					return fmt.Errorf("the parameters' CA certificate: %w", err)
				}
			}
		}
	default:
		return fmt.Errorf("the node cannot rejoin its cluster: %w", err)
	}
	cp.NodeKey = en.key
	var binding *dataBinding
	if n.cfg.DataDisk != nil {
		binding = newDataBinding(n.cfg.DataDisk, n.values)
		cp.BeforeConsensus = binding.beforeConsensus
	}

	rs, err := roleserve.New(roleserve.Config{
		Node:         roleserve.NodeInfo{ExternalAddress: n.cfg.Address, Version: Version, BootID: n.bootID, DataSealing: n.cfg.DataSealing},
		ControlPlane: cp,
		Kubernetes: roleserve.KubernetesConfig{
			Bundle: n.cfg.KubernetesBundle,
			// Derived from the cluster's PKI at every start: nothing to
			// keep across a reboot.
			Dir:           filepath.Join(n.root.Ephemeral.Path, "kubernetes"),
			APIServerPort: n.cfg.KubernetesAPIServerPort,
			Runtime:       n.kubernetesRuntime(),
			// Beside polis/ (the agent) and a worker's kubernetes/,
			// at the top of the tree, where the node's metrics see it.
			ControlPlaneCgroup: n.cgroup("kube-controlplane"),
		},
		RolesFile:     n.root.Data.Roles,
		DirectoryFile: n.root.ESP.ClusterDirectory,
		// Beside the node's own key, in its private directory: peers
		// know the node by this key's public half, across reboots.
		WireGuardKeyFile: filepath.Join(n.root.Data.Node.Path, "wireguard.key"),
	}, n.values)
	if err != nil {
		return err
	}
	apiCert := &nodeAPICertificate{
		address:     n.cfg.Address,
		now:         time.Now,
		renewAt:     n.apiRenewAt,
		credentials: &n.values.Credentials,
		directory:   &n.values.Directory,
		cert:        &n.apiCertificate,
	}
	api, err := nodeapi.New(nodeapi.Config{
		Address:           n.cfg.Address,
		APICertificate:    &n.apiCertificate,
		Port:              n.cfg.NodeAPIPort,
		MetricsPort:       n.cfg.MetricsPort,
		Credentials:       &n.values.Credentials,
		LocalControlPlane: &n.values.LocalControlPlane,
		OwnerKey:          nodeapi.CuratorOwnerKey(&n.values.Membership),
		Logs:              n.cfg.LogRing,
		RoleServer:        &nodeapi.RoleServer{Edges: rs.Graph().Edges, Values: nodeapi.RoleServerValues(n.values), Reactions: rs.Graph().Workers},
		Power:             n.cfg.Power,
		Cgroups:           n.cfg.Cgroups,
	})
	if err != nil {
		return err
	}
	if err := supervisor.Run(ctx, "enrolment", en.run); err != nil {
		return err
	}
	if err := supervisor.Run(ctx, "roleserve", rs.Run); err != nil {
		return err
	}
	if binding != nil {
		if err := supervisor.Run(ctx, "databinding", binding.run); err != nil {
			return err
		}
	}
	if err := supervisor.Run(ctx, "nodeapicert", apiCert.run); err != nil {
		return err
	}
	if err := supervisor.Run(ctx, "nodeapi", api.Run); err != nil {
		return err
	}
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	<-ctx.Done()
	return ctx.Err()
}

// status is the node's status at registration or bootstrap.
func (n *Node) status() *cpb.NodeStatus {
	port := n.cfg.ConsensusPort
	if port == 0 {
		port = roleserve.DefaultConsensusPort
	}
	return &cpb.NodeStatus{ExternalAddress: n.cfg.Address.String(), Version: Version, BootId: n.bootID, ConsensusPeerPort: uint32(port)}
}

// nodeKey returns the node's key, creating and storing it on first use: a
// node that crashes while enrolling comes back with the same key, so the
// curator's records of it still apply.
func (n *Node) nodeKey() (ed25519.PrivateKey, error) {
	f := n.root.Data.Node.Key
	der, err := f.Read()
	if err == nil {
		return identity.ParsePrivateKey(der)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	key, err := identity.GenerateKey()
	if err != nil {
		return nil, err
	}
	der, err = identity.MarshalPrivateKey(key)
	if err != nil {
		return nil, err
	}
	if err := f.Write(der); err != nil {
		return nil, err
	}
	return key, nil
}

// checkKeyFile refuses to run an enrolled node whose key file, if it still
// has one, holds another key than the sealed configuration: one of them
// was replaced, and guessing which would make the node someone else.
func (n *Node) checkKeyFile(sealed ed25519.PrivateKey) error {
	f := n.root.Data.Node.Key
	der, err := f.Read()
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		// Unused once enrolled: the sealed configuration has the key.
		return f.Remove()
	}
	key, err := identity.ParsePrivateKey(der)
	if err != nil || !key.Equal(sealed) {
		return fmt.Errorf("%s holds another key than the sealed configuration %s: one of them was replaced; if the sealed configuration is the node's, remove %s", f.Path, n.root.ESP.SealedConfiguration.Path, f.Path)
	}
	return nil
}

// restoreRoles reports whether the node was a consensus member when it
// stopped, from its saved roles (roleserve.SavedRoles, which rolefetch
// keeps); when they are missing or damaged, from its consensus data, and it
// then saves roles that say so. Without them a lone
// control-plane node would wait for a curator to tell it to start its
// control plane, and no curator runs until it does.
func (n *Node) restoreRoles(logger *zap.Logger) (bool, error) {
	saved := roleserve.SavedRoles(n.root.Data.Roles)
	if roles := saved.Load(logger); roles != nil {
		return roles.ConsensusMember != nil, nil
	}
	member, err := consensus.HasMember(n.root.Data.Etcd.Path)
	if err != nil {
		return false, err
	}
	if !member {
		// The curator tells the node its roles once it reaches one.
		return false, nil
	}
	// The join data is only needed to join for the first time; the member
	// restarts from its data.
	logger.Info("rebuilt the saved roles from the consensus data: this node is a consensus member", zap.String("file", saved.File.Path))
	if err := saved.Save(&cpb.Roles{ConsensusMember: &cpb.ConsensusMemberRole{}}); err != nil {
		return false, err
	}
	return true, nil
}

// knownCurators returns the curators the node knew when it stopped: the
// saved cluster directory (roleserve.SavedDirectory, which clusterdirectory
// keeps), or, when that is missing or damaged, the one
// its parameters gave it (which it then saves again). A node that finds its
// curators through its own curator may know none.
func (n *Node) knownCurators(logger *zap.Logger, ca *x509.Certificate) []*cpb.CuratorEndpoint {
	saved := roleserve.SavedDirectory(n.root.ESP.ClusterDirectory)
	dir := saved.Load(logger)
	if len(dir.GetCurators()) > 0 {
		return dir.Curators
	}
	var p nodev1.NodeParameters
	if err := n.root.ESP.NodeParameters.ReadProto(&p); err != nil {
		return nil
	}
	curators := p.GetClusterRegister().GetClusterDirectory().GetCurators()
	if len(curators) == 0 {
		return nil
	}
	logger.Info("rebuilt the cluster directory from the node parameters", zap.Int("curators", len(curators)), zap.String("file", saved.File.Path))
	if err := saved.Save(&cpb.ClusterDirectory{Curators: curators, CaCertificate: ca.Raw}); err != nil {
		// A directory is where to look first, not state the node acts
		// on: an ESP that takes no writes must not keep it from its
		// cluster (as in clusterdirectory).
		logger.Error("could not save the rebuilt cluster directory: going on with it", zap.Error(err))
	}
	return curators
}

// cgroup is the path of the cgroup name at the top of the node's tree
// (Config.Cgroups); "" without a tree.
func (n *Node) cgroup(name string) string {
	if n.cfg.Cgroups == "" {
		return ""
	}
	return filepath.Join(n.cfg.Cgroups, name)
}

// kubernetesRuntime is the container runtime for KubernetesWorker: the
// binaries and the pause image from the tree at cfg.KubernetesRuntime (the
// system disk), laid out as node/pid1 says; containerd's and the kubelet's
// state on the data disk; sockets and generated files on the ephemeral
// storage; a cgroup of their own, and beside it one for the node services
// (kube-proxy, the DNS server), weighted below it. Nil without a runtime.
func (n *Node) kubernetesRuntime() *roleserve.KubernetesRuntime {
	root := n.cfg.KubernetesRuntime
	if root == "" {
		return nil
	}
	below := func(systemPath string) string {
		return filepath.Join(root, strings.TrimPrefix(systemPath, pid1.SystemRoot))
	}
	return &roleserve.KubernetesRuntime{
		BinDir:     below(pid1.SystemBinDir),
		CNIBinDir:  below(pid1.SystemCNIBinDir),
		PauseImage: below(pid1.SystemPauseImage),
		StateDir:   filepath.Join(n.root.Data.Path, "kubernetes"),
		RunDir:     filepath.Join(n.root.Ephemeral.Path, "kubelet"),
		Cgroup:     filepath.Join(kubelet.CgroupMount, "kubernetes"),
		// A sibling of Cgroup and of the agent's polis/: cgroup v2
		// weights only share the CPU among siblings.
		ServicesCgroup: filepath.Join(kubelet.CgroupMount, "kube-services"),
		Registries:     n.cfg.KubernetesRegistries,
	}
}
