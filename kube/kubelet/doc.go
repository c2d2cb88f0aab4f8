// Package kubelet runs the Kubernetes node of one Polis node: containerd
// and kubelet as supervised child processes (kube/process), with the
// configuration Polis writes for them, a local TCP proxy through which the
// kubelet reaches every apiserver of the cluster, and a status that says
// what runs and whether the Node is Ready.
//
// # Model
//
// A Runner is given everything from outside (Config): where the binaries
// are (the system disk, node/pid1's System* paths, in a VM), where state
// goes (the data disk) and sockets and generated files (ephemeral
// storage), the node's name (its Polis node ID), address and labels, the
// kubelet's certificates (issued by the curator, IssueKubeletCredentials,
// for keys the node keeps), the apiservers, and the Pods' nameserver (the
// node's DNS server, kube/dns, which the kubernetes worker runs beside the
// kubelet with kube-proxy). Its Run:
//
//	Run ─┬─ (containerd, a process of the run itself)
//	     │    then: wait until it answers grpc.health.v1.Health/Check on its socket
//	     │    then: ctr images import <pause image>   (nothing is pulled; skipped
//	     │          when containerd's content holds its manifest already)
//	     ├─ apiproxy    127.0.0.1:ProxyPort → the apiservers, in turn
//	     │    then: wait until an apiserver answers /readyz
//	     ├─ kubelet     polis-kube kubelet --config ... --kubeconfig ...
//	     ├─ nodeready   list the Node by name, then watch it, as the kubelet
//	     └─ nodelabels  PATCH the Node's labels as the kubelet (SetLabels)
//
// containerd is asked whether it answers in the runner's own process, over
// gRPC on its socket (the standard health service, which containerd
// serves), not with ctr version: every ctr is a 23 MB binary's start, 0.6
// to 2.4 s of a worker's single vCPU under TCG. ctr runs only to import
// the pause image.
//
// The kubelet starts once an apiserver is ready: one started before fails
// its first steps that need the apiserver and retries them with a backoff
// of minutes, its Node not Ready meanwhile. A kubelet that exits is
// restarted alone, with backoff; containerd
// exiting ends the run (the kubelet cannot work without it), and the
// supervisor starts it afresh. Stop order: when the run ends, the
// supervisor stops the kubelet (and the proxy and probe) first; only then,
// in a supervisor.Cleanup, every container is killed (cgroup.kill on the
// pods' cgroup), containerd is stopped, and whatever is left in its cgroup
// (its shims) is killed too: nothing is left behind. The cgroups are the
// only way to find the shims, which containerd starts in sessions of
// their own; without Config.Cgroup (tests, on hosts without cgroup v2)
// only the processes Polis started are stopped.
//
// A stop then leaves the runtime as a reboot would. Once the kernel says
// the node's cgroup is empty, the runtime's state in RunDir (on tmpfs,
// which a reboot empties) is cleaned: the mounts below containerd's state
// and runc's root (the containers' root filesystems, the sandboxes'
// /dev/shm and network namespaces, all kept there by containerd's
// configuration) are detached, deepest first, and the directories
// emptied. containerd's root on the data disk (images, snapshots, its
// metadata) is kept. The next containerd so finds no task to restore and
// no dead shim to clean up (a containerd-shim-runc-v2 delete for each,
// seconds under TCG); its CRI plugin and the kubelet find the Pods'
// containers and sandboxes in its metadata without tasks, exactly as
// after a reboot, and stop, tear down and remove them the same way.
// Nothing is cleaned when processes are left or without Config.Cgroup,
// and nothing is removed while a mount is still below the directories.
// What the Pods leave outside RunDir stays too (the node may run them
// again): the bridge Bridge, CNI's state and portmap's nftables table,
// which DeleteBridge, RemoveCNIState and HostPortTable are for (the
// kubernetes worker removes them when the role goes).
//
// Whether the Node is Ready is watched, not polled (nodeready): the runner
// lists the Node selected by its name (the Node authorizer lets a node
// list and watch its own Node so, as the kubelet's informer does; a Node
// not registered yet is an empty list, whose registration the watch then
// sees), and watches it from the list's resourceVersion, with bookmarks,
// publishing NodeReady and NodeNote at each change. Ready counts only if a
// kubelet of this run posted it (its heartbeat is not older than the
// run): after a reboot the Node keeps the last boot's Ready until the
// node controller sees the lease go stale, and that is not this node's
// word. A watch the apiserver
// ends (after watchSeconds) is resumed from the last resourceVersion; one
// that expired (410 Gone) is followed by a new list at once, one that
// failed by a new list after a backoff of at most 2 s (the interval of
// the poll this replaced), NodeNote saying why the Node is not Ready while
// it cannot be read. The client's HTTP/2 pings find a connection gone
// silent under a watch.
//
// The local proxy is plain TCP: TLS runs end to end between the kubelet
// and an apiserver, whose serving certificate names "localhost" (the
// kubeconfig's server). It dials the apiservers in turn, starting after
// the last one that failed, so that losing one controller node does not
// strand the kubelet; SetAPIServers replaces the list while it runs.
//
// Node labels: NodeRestriction lets a kubelet set labels outside the
// kubernetes.io and k8s.io namespaces only (and a few listed ones), and a
// refused label fails the Node's registration. NodeLabels therefore maps
// the node's Polis labels: a key without a prefix gets LabelPrefix
// ("node.polis-os.io/"), a key with a prefix of its own is kept, and one
// in the kubernetes.io or k8s.io namespaces is left out. kubelet applies
// them when it registers the Node; afterwards the runner keeps them
// (SetLabels, nodelabels): it patches the Node as the kubelet whenever they
// change, and removes the labels it set that are gone, known by the
// annotation LabelsAnnotation (and LabelPrefix), leaving others' labels
// alone.
//
// # What it does not do
//
// It does not decide whether the node runs a kubelet (the kubernetes
// worker, roleserve, does), obtain or renew certificates (the worker asks
// the curator and calls Renew), choose the node's pod range (the curator
// gives each worker its own, Config.PodCIDR, which the CNI configuration
// hands out and the kubelet is told), route pod traffic between nodes
// (package clusternet), or prepare the machine (cgroup v2, modules,
// sysctls, mounts: PID 1, node/pid1). Pods get no NAT to the outside;
// host ports need the nft binary (see cniConfig).
package kubelet
