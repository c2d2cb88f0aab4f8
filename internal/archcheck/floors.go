package archcheck

// Module is the module whose packages the floors place.
const Module = "github.com/polis-os/polis"

// Floors are the layers of the code base, lowest first. A package may
// import packages of its own floor and of the floors below, never of a
// floor above. A package is placed by the longest folder of a floor that
// holds it ("kube/" holds kube/pki unless kube/pki is named itself), so a
// new package joins its parent folder's floor.
var Floors = []Floor{
	{
		Name: "contracts and leaves",
		Why:  "what everything else speaks (the API, identities, event values) and small libraries that know no Polis package above them",
		Folders: []string{
			"api/", "event", "identity", "logring",
			"internal/atomicfile", "internal/cmdmain", "internal/failpoint", "internal/testutil",
			"internal/devmapper", "internal/watchdog", "internal/mountinfo", "internal/kernelprofile", "internal/cgroupdir", "node/diskseal", "kube/pki", "kube/apiproxy", "kube/bundle",
			"launch/debpkg", "launch/demoimage", "curator/backup",
		},
	},
	{
		Name: "runtime",
		Why:  "the reactive runtime (value backends, the supervisor), storage on disk (and PID 1, which unlocks and mounts it), and the shared gRPC authorization layer",
		Folders: []string{
			"event/", "supervisor", "supervisor/supervisortest", "localstorage", "node/pid1", "internal/rpcauth",
			"clusternet", "kube/process", "kube/kubetest",
		},
	},
	{
		Name: "services",
		Why:  "what a role runs, each on its own: the etcd member, the curator's client, the Kubernetes components",
		Folders: []string{
			"consensus", "curator/client", "kube/",
		},
	},
	{
		Name:    "curator",
		Why:     "the cluster's state and its one authority; it knows nothing of a node's role server",
		Folders: []string{"curator"},
	},
	{
		Name:    "role server",
		Why:     "the workers that turn a node's roles into running services",
		Folders: []string{"roleserve"},
	},
	{
		Name:    "node API",
		Why:     "what a node shows of itself; it reads the role server's values",
		Folders: []string{"nodeapi"},
	},
	{
		Name:    "node agent",
		Why:     "one machine's agent: boot, enrolment, the role server and the node API put together",
		Folders: []string{"node"},
	},
	{
		Name: "operator tools",
		Why:  "what runs beside a cluster, not in it: polisctl's commands and the owner's configuration directory they share, the image and system-tree builders, VMs, test kits over whole nodes",
		Folders: []string{
			"polisctl", "ownerdir", "launch/image", "launch/systembuild", "launch/vm", "launch/vm/vmtest",
			"node/nodetest", "kube/roletest",
		},
	},
	{
		Name:    "launcher",
		Why:     "forms whole clusters of processes or VMs",
		Folders: []string{"launch"},
	},
	{
		Name:    "suite kit",
		Why:     "what the suites over whole clusters share, written once against the launched cluster",
		Folders: []string{"internal/clustertest"},
	},
	{
		Name:    "commands and suites",
		Why:     "main packages and the suites over whole clusters; nothing imports them",
		Folders: []string{"cmd/", "test/", "internal/archcheck"},
	},
}

// Floor is one layer of the code base.
type Floor struct {
	// Name is what docs/architecture.md calls the floor.
	Name string
	// Why says what the floor holds.
	Why string
	// Folders are the package paths (relative to Module) the floor holds:
	// "curator" the package curator itself, "kube/" every package below
	// kube/.
	Folders []string
}

// TestKits are packages that exist for tests: only tests and other test
// kits may import them, never a package's own code.
var TestKits = []string{
	"internal/testutil", "event/eventtest", "supervisor/supervisortest", "kube/kubetest",
	"node/nodetest", "kube/roletest", "internal/clustertest", "launch/vm/vmtest",
}

// Forbidden are arrows that the floors alone would allow but that must not
// be drawn, each with why: From may not import To (a folder ending in "/"
// stands for every package below it).
var Forbidden = []Arrow{
	{From: "kube/", To: "consensus", Why: "Kubernetes reaches etcd only through the confined proxy (kube/etcdproxy) and its client; kube/controller, which assembles the proxy over the member, is the one exception", Except: []string{"kube/controller"}},
	{From: "launch", To: "polisctl", Why: "the launcher acts as the owner through ownerdir, the library polisctl's commands share with it, and does not link the command line"},
	{From: "curator/client", To: "consensus", Why: "clients of the curator (polisctl, nodes before they run etcd) must not link the etcd member"},
}

// Arrow is a forbidden import.
type Arrow struct {
	From, To string
	Why      string
	// Except are packages of From that may draw the arrow all the same.
	Except []string
}
