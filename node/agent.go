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
	"time"

	"go.uber.org/zap"

	cpb "github.com/polis-os/polis/api/curator/v1"
	nodev1 "github.com/polis-os/polis/api/node/v1"
	"github.com/polis-os/polis/curator"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/localstorage"
	"github.com/polis-os/polis/logring"
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
	// ConsensusPort and CuratorPort default to roleserve's defaults.
	ConsensusPort, CuratorPort uint16
	// LeaseTTL and HeartbeatInterval are passed to the curator; zero means
	// its defaults. Tests shorten them.
	LeaseTTL, HeartbeatInterval time.Duration
	// NodeAPIPort is the node API's port and MetricsPort that of its
	// /metrics; zero means nodeapi's defaults.
	NodeAPIPort, MetricsPort uint16
	// LogRing holds the agent's log lines for the node API's Logs; the
	// caller tees its logger into it. Optional.
	LogRing *logring.Ring
	// Power reboots or powers off the node for the node API; optional
	// (without it the node API refuses both).
	Power nodeapi.PowerFunc
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
}

// New validates cfg and lays out the storage root.
func New(cfg Config) (*Node, error) {
	if cfg.StorageRoot == "" {
		return nil, errors.New("node config: StorageRoot is required")
	}
	if !cfg.Address.IsValid() || cfg.Address.IsUnspecified() {
		return nil, fmt.Errorf("node config: Address %v: a node needs the IP address other nodes reach it on", cfg.Address)
	}
	if cfg.Sealer == nil {
		cfg.Sealer = localstorage.Unsealed{}
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
	return &Node{cfg: cfg, root: root, values: roleserve.NewValues(), bootID: hex.EncodeToString(id), renewAt: identity.RenewAt}, nil
}

// Values are the node's role-server values, for status pages and tests.
func (n *Node) Values() *roleserve.Values { return n.values }

// Run enrols the node (if it has not) and runs its role server until ctx is
// cancelled.
func (n *Node) Run(ctx context.Context) error {
	logger := supervisor.Logger(ctx)
	if err := n.root.Create(); err != nil {
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
	}

	sealed, err := readSealedConfiguration(n.root, n.cfg.Sealer)
	switch {
	case err == nil:
		// Enrolled before: rejoin with the sealed identity.
		en.key = ed25519.NewKeyFromSeed(sealed.NodePrivateKeySeed)
		if en.ca, err = x509.ParseCertificate(sealed.CaCertificate); err != nil {
			return fmt.Errorf("the sealed configuration's CA certificate: %w", err)
		}
		// A control-plane node finds its own curator first; the others the
		// curators they knew.
		var roles cpb.Roles
		if err := n.root.Data.Roles.ReadProto(&roles); err == nil && roles.ConsensusMember != nil {
			en.localCurator = true
		}
		logger.Info("rejoining the cluster", zap.String("node", identity.NodeID(en.key.Public().(ed25519.PublicKey))), zap.Bool("through_own_curator", en.localCurator))
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
				OwnerKey:   c.ClusterBootstrap.OwnerPublicKey,
				NodeKey:    pub,
				NodeStatus: n.status(),
			}
			en.localCurator = true
		case *nodev1.NodeParameters_ClusterRegister:
			logger.Info("registering into a cluster", zap.String("node", identity.NodeID(pub)), zap.Strings("parameters_from", sources))
			en.register = c.ClusterRegister
			en.status = n.status()
			if en.ca, err = x509.ParseCertificate(c.ClusterRegister.ClusterDirectory.CaCertificate); err != nil {
				return fmt.Errorf("the parameters' CA certificate: %w", err)
			}
		}
	default:
		return err
	}
	cp.NodeKey = en.key

	rs, err := roleserve.New(roleserve.Config{
		Node:          roleserve.NodeInfo{ExternalAddress: n.cfg.Address, Version: Version, BootID: n.bootID},
		ControlPlane:  cp,
		RolesFile:     n.root.Data.Roles,
		DirectoryFile: n.root.ESP.ClusterDirectory,
	}, n.values)
	if err != nil {
		return err
	}
	api, err := nodeapi.New(nodeapi.Config{
		Address:           n.cfg.Address,
		Port:              n.cfg.NodeAPIPort,
		MetricsPort:       n.cfg.MetricsPort,
		Credentials:       &n.values.Credentials,
		LocalControlPlane: &n.values.LocalControlPlane,
		Logs:              n.cfg.LogRing,
		RoleServer:        roleServerView(rs, n.values, n.cfg.LogRing),
		Power:             n.cfg.Power,
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
	if err := supervisor.Run(ctx, "nodeapi", api.Run); err != nil {
		return err
	}
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	<-ctx.Done()
	return ctx.Err()
}

// roleServerView is what the node API shows of the role server. Worker
// reactions come from the log lines for now (nodeapi.LogReactions), until
// the role server records them itself.
func roleServerView(rs *roleserve.RoleServer, v *roleserve.Values, ring *logring.Ring) *nodeapi.RoleServer {
	view := &nodeapi.RoleServer{Edges: rs.Graph().Edges, Values: nodeapi.RoleServerValues(v)}
	if ring != nil {
		view.Reactions = nodeapi.LogReactions{Ring: ring, Prefix: "root.roleserve"}
	}
	return view
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
