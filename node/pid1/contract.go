package pid1

import "time"

// What the node image, the launcher and the agent as PID 1 agree on: the
// image builder (launch/image) writes these paths, the launcher names the
// disks and the command line, PID 1 reads them.
const (
	// FatalMessage starts the console line PID 1 prints before it reboots
	// a machine it could not prepare, or whose agent could not start
	// (Fatal): the launcher names it when such a VM reboots.
	FatalMessage = "polis: FATAL"

	// InitPath is where the kernel runs the agent from.
	InitPath = "/init"
	// ModulesDir holds the kernel modules the image carries.
	ModulesDir = "/lib/modules"
	// ModuleListPath lists the modules to load, one path a line, in an
	// order that loads every module after what it needs.
	ModuleListPath = "/etc/polis/modules"

	// SerialESP and SerialData are the serial numbers of the ESP and data
	// disks (qemu: -drive ...,serial=polis-esp).
	SerialESP  = "polis-esp"
	SerialData = "polis-data"

	// SerialSystem is the serial number of the read-only system disk: the
	// large binaries a node runs besides the agent (the Kubernetes bundle
	// with kubelet, containerd and its runc shim, runc, the CNI plugins)
	// and the images it loads itself. They live on a disk of their own,
	// not in the initramfs, so that no boot unpacks them into RAM.
	SerialSystem = "polis-system"
	// SystemRoot is where PID 1 mounts the system disk, read-only. The
	// image builder lays the disk out as the System* paths below say.
	SystemRoot = "/system"
	// SystemBinDir holds the executables: polis-kube (SystemKubeBundle),
	// containerd, containerd-shim-runc-v2, runc, and the static mount and
	// umount that kubelet executes. Child processes that need them get it
	// first in their PATH.
	SystemBinDir = SystemRoot + "/bin"
	// SystemKubeBundle is the Kubernetes bundle (kube/bundle) on the
	// system disk; its subcommands include kubelet.
	SystemKubeBundle = SystemBinDir + "/polis-kube"
	// SystemCNIBinDir holds the CNI plugins (bridge, host-local,
	// loopback, portmap).
	SystemCNIBinDir = SystemRoot + "/cni/bin"
	// SystemImagesDir holds OCI image archives (tar) that the node loads
	// into containerd itself rather than pulling: SystemPauseImage, the
	// pod sandbox image, is Polis' own.
	SystemImagesDir  = SystemRoot + "/images"
	SystemPauseImage = SystemImagesDir + "/pause.tar"
	// SystemIDPath is written by the image builder, not taken from the
	// tree: the hash of everything the disk was built from, which PID 1
	// prints, so that one can tell which system disk a node runs.
	SystemIDPath = SystemRoot + "/polis-system-id"

	// CgroupRoot is where PID 1 mounts cgroup v2, with every controller a
	// kubelet needs enabled for the tree below (CgroupNodeDir and the
	// Kubernetes cgroups beside it).
	CgroupRoot = "/sys/fs/cgroup"
	// CgroupNodeDir holds the node's own processes: the agent, in
	// CgroupAgentDir. What the agent runs for Kubernetes is in
	// CgroupRoot's other children, which the kube packages make:
	// kube-controlplane/ (kube/controlplane), kubernetes/ with containerd,
	// the kubelet and the pods (kube/kubelet), and kube-services/
	// (kube/nodeservice).
	CgroupNodeDir = CgroupRoot + "/polis"
	// CgroupAgentDir is the agent's own cgroup, a leaf: PID 1 moves
	// itself there before it delegates the controllers.
	CgroupAgentDir = CgroupNodeDir + "/agent"

	// AddressParameter is the kernel command-line parameter with the
	// node's cluster address and prefix: polis.address=10.0.0.2/24.
	AddressParameter = ParameterPrefix + "address"
	// ParameterPrefix starts every kernel command-line parameter PID 1
	// reads: polis.address, and polis.FLAG=VALUE for each of AgentFlags.
	ParameterPrefix = "polis."
	// DiskBenchParameter (polis.diskbench=MODE) makes the machine measure
	// its data disk instead of running the agent, and power off: for
	// docs/benchmarks.md only (launch/vm's BenchmarkDataDisk). MODE is
	// DiskBenchDefault; DiskBenchNoWorkqueue to map an encrypted data
	// disk with dm-crypt's no_read_workqueue and no_write_workqueue;
	// DiskBenchZeroedJournal to format a blank one with its journal
	// zeroed, as before lazyjournal.go.
	DiskBenchParameter = ParameterPrefix + "diskbench"
	// DiskBenchStartParameter (polis.diskbench-start=UNIX-SECONDS) makes
	// the benchmark wait until then before it measures, so that machines
	// booted together measure together, whatever their boots took.
	DiskBenchStartParameter = ParameterPrefix + "diskbench-start"
	// DiskBenchMessage starts the line with the figures.
	DiskBenchMessage = "polis: diskbench:"

	// RestoreSnapshotFWCfg names the fw_cfg file of a machine booted to
	// restore a cluster from a backup onto its fresh disks: the launcher
	// decrypts the backup with the owner key on the host and gives the
	// machine the snapshot alone (etcd's format), never the key.
	// RestoreSnapshotPath is where the guest reads it; the launcher
	// names it on the kernel command line for that boot
	// (polis.restore-snapshot=RestoreSnapshotPath, the agent's
	// --restore-snapshot).
	RestoreSnapshotFWCfg = "opt/polis/restore-snapshot"
	RestoreSnapshotPath  = "/sys/firmware/qemu_fw_cfg/by_name/" + RestoreSnapshotFWCfg + "/raw"

	// StorageRoot is the node's storage root (localstorage), with the ESP
	// mounted at esp/, the data disk at data/ and a tmpfs at ephemeral/.
	StorageRoot = "/polis"

	// PreparedMessage starts the one line PID 1 prints once the machine is
	// prepared, before the agent starts: the root file system, the system
	// disk (or its absence), the cgroup controllers delegated and the
	// agent's cgroup, the modules and sysctls. Tests and operators read
	// it from the console.
	PreparedMessage = "polis: machine prepared:"
	// BootedMessage is the line PID 1 prints on the console when the
	// machine is ready and the agent starts; the launcher waits for it.
	BootedMessage = "polis: machine ready, starting the node agent"
	// RecoveryRefusedMessage starts the console line of a machine booted
	// with polis.recover-single-member=true whose recovery was refused
	// (another consensus member answers, or its data cannot recover the
	// cluster), with the reason: the node then starts as usual. The
	// launcher reports it (launch.Cluster.RecoverSingleMember).
	RecoveryRefusedMessage = "polis: the recovery was refused:"
	// HaltMessage starts the last line PID 1 prints before power-off or
	// reboot.
	HaltMessage = "polis: halting"
	// DiskBenchDefault and DiskBenchNoWorkqueue are the modes of
	// DiskBenchParameter.
	DiskBenchDefault       = "default"
	DiskBenchNoWorkqueue   = "no-workqueue"
	DiskBenchZeroedJournal = "zeroed-journal"
	// RebootMessage starts the halt line of a reboot (the launcher boots
	// the machine again: qemu runs with -no-reboot).
	RebootMessage = HaltMessage + ": reboot"
)

// OptionalModules are modules (by name, as in ModuleListPath) that may find
// no hardware: their init fails with ENODEV on a CPU without the feature
// they drive, and PID 1 goes on without them. aesni_intel is the data
// disk's AES in the CPU's instructions, many times faster than the
// built-in table AES, above all under TCG (launch/vm gives the guest
// CPU the aes flag); without it, dm-crypt uses the built-in one.
var OptionalModules = []string{"aesni_intel"}

// ModuleParameters are the parameters PID 1 loads a module with, by the
// module's name. The kernel's watchdog core (watchdog) would stop every
// watchdog at reboot(2) by default; with stop_on_reboot=0 the hardware
// watchdog PID 1 armed keeps counting until the machine resets, so a
// machine stuck on its way down (a device's shutdown that never returns)
// is reset too, not only one stuck while it runs.
var ModuleParameters = map[string]string{"watchdog": "stop_on_reboot=0"}

// WatchdogTimeout is how long the machine's hardware watchdog, which PID 1
// arms at boot and feeds every WatchdogInterval while it runs, waits
// before it resets a machine that stopped feeding it: long enough that a
// busy machine (an emulated CPU on a loaded host) never misses it, short
// enough that a hung node is back well before anyone would have to look.
// A halt has WatchdogHaltTimeout from its start, unfed: more than a slow
// sync and unmount under TCG take, and more than launch/vm's HaltTimeout
// (90 s), which ends a VM stuck in its halt first. A reset is a reboot:
// under qemu (-no-reboot), launch boots the machine again, unless it was
// powering off.
const (
	WatchdogTimeout     = 60 * time.Second
	WatchdogInterval    = 10 * time.Second
	WatchdogHaltTimeout = 2 * time.Minute
)

// AgentFlags are the node agent's flags a machine's kernel command line may
// set, as polis.FLAG=VALUE (polis.lease-ttl=5s): the same settings a
// development node takes on its command line (cmd/polis-node), so that a
// VM cluster is launched with the same options as a cluster of processes.
// Any other polis.* parameter is refused: a misspelt setting must not be
// silently dropped.
//
// Why the kernel command line and not the node parameters (fw_cfg): these
// are the machine's own settings, needed on every boot, as a bootloader
// entry gives them on a real machine; the node parameters are enrolment
// (which cluster, the register ticket), which the launcher withdraws once
// the node is UP so that no ticket lingers, and which an enrolled node
// does without, rejoining from its sealed configuration.
//
// kubernetes-registry (HOST=URL, the first "=" ends the flag's name) may
// be given more than once, one registry each. The system disk's paths
// (--kubernetes-bundle, --kubernetes-runtime) are not among them: PID 1
// knows whether it mounted one (Machine.System).
//
// recover-single-member (polis.recover-single-member=true) and
// restore-snapshot (RestoreSnapshotPath) are a boot's own settings, as a
// one-time bootloader entry gives them: the launcher boots a survivor of
// a cluster that lost its quorum once with the first
// (launch.Cluster.RecoverSingleMember), and a machine with fresh disks
// once with the second to restore a backup onto it. Started again with
// either, a node that was recovered or restored already starts as usual.
var AgentFlags = []string{"lease-ttl", "heartbeat-interval", "consensus-port", "curator-port", "consensus-heartbeat", "consensus-election-timeout", "kubernetes-registry", "recover-single-member", "restore-snapshot"}
