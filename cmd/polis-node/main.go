// Command polis-node is the Polis node agent run as an ordinary process:
// the development mode, in which one machine runs several nodes, each with
// its own storage directory and its own (loopback) address. polis-launch
// starts it this way; inside a VM the same agent runs as PID 1 instead.
//
//	polis-node --storage DIR --address IP [--parameters FILE]
//
// A node that has not joined a cluster yet needs node parameters (bootstrap
// or register; see api/proto/polis/node/v1/node.proto); once it has joined,
// its storage is enough to rejoin, and --parameters is ignored.
//
// After a cluster lost the quorum of its consensus members, one command
// brings it back: on a survivor, polis-node --recover-single-member over
// its storage; on a new machine, polis-node --storage NEWDIR --address IP
// --restore-backup FILE --owner-key KEY (or --restore-snapshot FILE).
//
// Logs are structured (zap); every line names the runnable that wrote it
// (root.roleserve.heartbeat, ...). The same lines are kept in memory, a
// ring per runnable (logring), for the node API (polisctl node logs).
// SIGINT or SIGTERM stops the node: every runnable is cancelled and waited
// for, then the process exits with 0. The node API's PowerOff does the
// same; its Reboot stops the node the same way and then executes the agent
// again in the same process (same PID, same arguments).
package main

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/polis-os/polis/consensus"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/logring"
	"github.com/polis-os/polis/node"
	"github.com/polis-os/polis/nodeapi"
	"github.com/polis-os/polis/roleserve"
	"github.com/polis-os/polis/supervisor"
)

func main() {
	if os.Getpid() == 1 {
		// The machine's init, in the node image (node/pid1).
		runAsInit()
		return
	}
	if err := dieWithLauncher(); err != nil {
		fmt.Fprintln(os.Stderr, "polis-node:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stderr)
	switch {
	case errors.Is(err, errReboot):
		stop()
		err = reexec()
		fmt.Fprintln(os.Stderr, "polis-node: rebooting:", err)
		os.Exit(2)
	case err == nil, errors.Is(err, flag.ErrHelp):
	default:
		fmt.Fprintln(os.Stderr, "polis-node:", err)
		os.Exit(2)
	}
}

// launcherPIDEnv is launch.LauncherPIDEnv (a test checks they agree): the
// node agent does not import the launcher.
const launcherPIDEnv = "POLIS_LAUNCHER_PID"

// options are the command line, parsed and checked.
type options struct {
	cfg       node.Config
	level     zapcore.Level
	logFormat string
}

func parseFlags(args []string, errOut io.Writer) (*options, error) {
	fs := flag.NewFlagSet("polis-node", flag.ContinueOnError)
	fs.SetOutput(errOut)
	var (
		o                       options
		address                 string
		consensusPort, curPort  uint
		apiPort, metricsPort    uint
		level                   = zapcore.InfoLevel
		leaseTTL, heartbeatIntv time.Duration
		raftHeartbeat, election time.Duration
		restore                 node.RestoreSource
		ownerKey                string
	)
	fs.StringVar(&o.cfg.StorageRoot, "storage", "", "the node's storage directory (required)")
	fs.StringVar(&address, "address", "", "the IP address to listen on and advertise to other nodes (required)")
	fs.StringVar(&o.cfg.ParametersFile, "parameters", "", "a node parameters file (NodeParameters, binary protobuf); needed until the node has joined a cluster")
	fs.UintVar(&consensusPort, "consensus-port", roleserve.DefaultConsensusPort, "the consensus member's peer port")
	fs.UintVar(&curPort, "curator-port", roleserve.DefaultCuratorPort, "the curator's port")
	fs.UintVar(&apiPort, "node-api-port", nodeapi.DefaultPort, "the node API's port (polisctl node ...)")
	fs.UintVar(&metricsPort, "metrics-port", nodeapi.DefaultMetricsPort, "the port of /metrics (plain HTTP on a loopback address, else HTTPS with the cluster's mTLS)")
	fs.DurationVar(&leaseTTL, "lease-ttl", 0, "the curator leader's lease (0: the curator's default); tests shorten it")
	fs.DurationVar(&heartbeatIntv, "heartbeat-interval", 0, "how often nodes send heartbeats (0: the curator's default); tests shorten it")
	fs.DurationVar(&raftHeartbeat, "consensus-heartbeat", 0, "the consensus member's raft heartbeat (0: etcd's 100ms); every member of a cluster should have the same; raise it with --consensus-election-timeout on slow or emulated machines")
	fs.DurationVar(&election, "consensus-election-timeout", 0, "how long a consensus member waits for its leader before it starts an election (0: etcd's 1s); at least five heartbeats")
	fs.BoolVar(&o.cfg.RecoverConsensus, "recover-single-member", false, "the cluster lost the quorum of its consensus members for good and this node is a survivor: restart its consensus member as the single member of the cluster, keeping all data (refused while another member answers); then add new consensus members as usual")
	fs.StringVar(&restore.Backup, "restore-backup", "", "a backup file (polisctl cluster backup): on fresh --storage, start the node as the single consensus member of the cluster restored from it, decrypted with --owner-key; then add consensus members as usual")
	fs.StringVar(&ownerKey, "owner-key", "", "with --restore-backup: the owner's ed25519 private key the backup was encrypted to (PKCS#8, DER or PEM: key.der in polisctl's configuration directory); read, never stored")
	fs.StringVar(&restore.Snapshot, "restore-snapshot", "", "like --restore-backup, from one of a consensus member's automatic snapshots (its storage's data/consensus-snapshots/)")
	fs.StringVar(&o.cfg.KubernetesBundle, "kubernetes-bundle", "", "the absolute path of the Kubernetes bundle (polis-kube, built by polis-kube-build); without it the node runs no Kubernetes, and says so while it holds KubernetesController")
	fs.StringVar(&o.cfg.KubernetesRuntime, "kubernetes-runtime", "", "the root of the tree holding the container runtime (bin/, cni/bin/, images/pause.tar, as the system disk at /system); without it the node runs no kubelet, and says so while it holds KubernetesWorker")
	fs.Func("kubernetes-registry", "HOST=URL: containerd pulls images of registry HOST (as in image references) from URL (http or https); repeatable", func(v string) error {
		host, url, ok := strings.Cut(v, "=")
		if !ok || host == "" || url == "" {
			return fmt.Errorf("%q: want HOST=URL", v)
		}
		if o.cfg.KubernetesRegistries == nil {
			o.cfg.KubernetesRegistries = map[string]string{}
		}
		o.cfg.KubernetesRegistries[host] = url
		return nil
	})
	fs.TextVar(&level, "log-level", zapcore.InfoLevel, "the lowest level logged: debug, info, warn, error")
	fs.StringVar(&o.logFormat, "log-format", "console", "json or console")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.cfg.StorageRoot == "" {
		return nil, errors.New("--storage is required")
	}
	if address == "" {
		return nil, errors.New("--address is required")
	}
	addr, err := netip.ParseAddr(address)
	if err != nil {
		return nil, fmt.Errorf("--address: %w", err)
	}
	if addr.IsUnspecified() {
		// Other nodes are told this address; "any" reaches nobody.
		return nil, fmt.Errorf("--address %v: give the address other nodes reach this node on, not an unspecified one", addr)
	}
	o.cfg.Address = addr
	for _, p := range []struct {
		name string
		v    uint
		dst  *uint16
	}{{"consensus-port", consensusPort, &o.cfg.ConsensusPort}, {"curator-port", curPort, &o.cfg.CuratorPort}, {"node-api-port", apiPort, &o.cfg.NodeAPIPort}, {"metrics-port", metricsPort, &o.cfg.MetricsPort}} {
		if p.v == 0 || p.v > 65535 {
			return nil, fmt.Errorf("--%s %d: not a port", p.name, p.v)
		}
		*p.dst = uint16(p.v)
	}
	switch {
	case restore.Backup != "" && restore.Snapshot != "":
		return nil, errors.New("--restore-backup and --restore-snapshot: give one")
	case restore.Backup != "" && ownerKey == "":
		return nil, errors.New("--restore-backup needs --owner-key, the owner key the backup was encrypted to")
	case restore.Backup == "" && ownerKey != "":
		return nil, errors.New("--owner-key is for --restore-backup")
	case (restore.Backup != "" || restore.Snapshot != "") && o.cfg.RecoverConsensus:
		return nil, errors.New("--recover-single-member recovers on the node's own data, --restore-backup and --restore-snapshot onto fresh storage: give one")
	}
	if ownerKey != "" {
		key, err := readOwnerKey(ownerKey)
		if err != nil {
			return nil, fmt.Errorf("--owner-key: %w", err)
		}
		restore.OwnerKey = key
	}
	if restore.Backup != "" || restore.Snapshot != "" {
		o.cfg.Restore = &restore
	}
	if leaseTTL < 0 || heartbeatIntv < 0 {
		return nil, errors.New("--lease-ttl and --heartbeat-interval must not be negative")
	}
	o.cfg.LeaseTTL, o.cfg.HeartbeatInterval = leaseTTL, heartbeatIntv
	if err := checkRaftTimings(raftHeartbeat, election); err != nil {
		return nil, err
	}
	o.cfg.ConsensusHeartbeat, o.cfg.ConsensusElectionTimeout = raftHeartbeat, election
	if b := o.cfg.KubernetesBundle; b != "" && !filepath.IsAbs(b) {
		return nil, fmt.Errorf("--kubernetes-bundle %q: give an absolute path", b)
	}
	if r := o.cfg.KubernetesRuntime; r != "" && !filepath.IsAbs(r) {
		return nil, fmt.Errorf("--kubernetes-runtime %q: give an absolute path", r)
	}
	if o.logFormat != "json" && o.logFormat != "console" {
		return nil, fmt.Errorf("--log-format %q: want json or console", o.logFormat)
	}
	o.level = level
	return &o, nil
}

// readOwnerKey reads an ed25519 private key in PKCS#8, DER (polisctl's
// key.der) or PEM.
func readOwnerKey(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if blk, _ := pem.Decode(b); blk != nil {
		if blk.Type != "PRIVATE KEY" {
			return nil, fmt.Errorf("%s is a PEM %q block; want \"PRIVATE KEY\" (PKCS#8)", path, blk.Type)
		}
		b = blk.Bytes
	}
	key, err := identity.ParsePrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w; want an ed25519 private key in PKCS#8 (DER or PEM)", path, err)
	}
	return key, nil
}

// newLogger writes to out, and to ring if it is not nil; the logger's name
// (the runnable's place in the tree) is part of every line in both formats.
func newLogger(format string, level zapcore.Level, out io.Writer, ring *logring.Ring) *zap.Logger {
	ec := zap.NewProductionEncoderConfig()
	ec.EncodeTime = zapcore.ISO8601TimeEncoder
	var enc zapcore.Encoder
	if format == "json" {
		enc = zapcore.NewJSONEncoder(ec)
	} else {
		ec.EncodeLevel = zapcore.CapitalLevelEncoder
		enc = zapcore.NewConsoleEncoder(ec)
	}
	core := zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(out)), level)
	if ring != nil {
		core = zapcore.NewTee(core, ring.Core(level))
	}
	return zap.New(core, zap.AddCaller(), zap.AddStacktrace(zapcore.ErrorLevel))
}

// errReboot is what run returns when the node API asked for a reboot: the
// node has stopped, and main executes the agent again.
var errReboot = errors.New("reboot requested")

// reexec replaces the process with a new run of the same executable and
// arguments; it returns only on failure.
func reexec() error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	return syscall.Exec(exe, os.Args, os.Environ())
}

func run(ctx context.Context, args []string, logOut io.Writer) error {
	o, err := parseFlags(args, logOut)
	if err != nil {
		return err
	}
	ring := logring.New(logring.Config{})
	base := newLogger(o.logFormat, o.level, logOut, ring)
	defer base.Sync() //nolint:errcheck // stderr cannot always be synced
	// The supervisor names every runnable's logger after its place in the
	// tree (root.roleserve...); lines from outside the tree say "main".
	logger := base.Named("main")
	if !o.cfg.Address.IsLoopback() {
		logger.Warn("development mode on a non-loopback address: the node's ports are reachable from the network", zap.Stringer("address", o.cfg.Address))
	}
	// A power request from the node API stops the node as a signal does;
	// main then exits or starts the agent again.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var power atomic.Int32
	o.cfg.LogRing = ring
	o.cfg.Power = func(a nodeapi.PowerAction) {
		power.CompareAndSwap(0, int32(a))
		cancel()
	}
	n, err := node.New(o.cfg)
	if err != nil {
		return err
	}
	// Bad parameters fail every run alike: exit with the error rather
	// than let the supervisor retry.
	if err := n.Preflight(); err != nil {
		return err
	}
	logger.Info("starting the node agent",
		zap.String("version", node.Version),
		zap.String("storage", o.cfg.StorageRoot),
		zap.Stringer("address", o.cfg.Address),
		zap.Uint16("consensus_port", o.cfg.ConsensusPort),
		zap.Uint16("curator_port", o.cfg.CuratorPort),
		zap.String("kubernetes_bundle", o.cfg.KubernetesBundle), zap.String("kubernetes_runtime", o.cfg.KubernetesRuntime))
	// Before the supervisor, which would retry a refusal for ever: a
	// recovery that is refused ends here, with the reason.
	if err := n.PrepareRecovery(ctx, base.Named("root")); err != nil {
		return err
	}
	if err := n.PrepareRestore(ctx, base.Named("root")); err != nil {
		return err
	}
	s := supervisor.New(ctx, n.Run, supervisor.WithLogger(base))
	<-ctx.Done()
	logger.Info("stopping: waiting for every runnable to end")
	s.Wait()
	if nodeapi.PowerAction(power.Load()) == nodeapi.Reboot {
		logger.Info("stopped; rebooting: starting the agent again")
		return errReboot
	}
	logger.Info("stopped")
	return nil
}

// checkRaftTimings checks --consensus-heartbeat and
// --consensus-election-timeout as etcd would, the defaults (100ms, 1s)
// standing in for a zero, so that a wrong pair is named at the start and
// not when the node first runs a consensus member.
func checkRaftTimings(heartbeat, election time.Duration) error {
	if heartbeat < 0 || election < 0 {
		return errors.New("--consensus-heartbeat and --consensus-election-timeout must not be negative")
	}
	h, e := cmp.Or(heartbeat, consensus.DefaultHeartbeatInterval), cmp.Or(election, consensus.DefaultElectionTimeout)
	if h%time.Millisecond != 0 || e%time.Millisecond != 0 {
		return fmt.Errorf("--consensus-heartbeat %v and --consensus-election-timeout %v: give whole milliseconds", h, e)
	}
	if e < 5*h {
		return fmt.Errorf("--consensus-election-timeout %v is less than five heartbeats of %v: raise it to at least %v", e, h, 5*h)
	}
	return nil
}
