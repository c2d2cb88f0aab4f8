// Package roleserve is the node's role server: a set of event values that
// hold what the node knows (how to reach a curator, its roles, its local
// control plane, ...) and small workers that each combine a few of them and
// react.
//
// Every worker has a handle on the role server's Graph (Graph.Worker),
// which carries its name: the name is written once, in the worker's
// constructor, and everything else hangs off the handle. Through it the
// constructor declares the values the worker reads and writes (Reads and
// Writes, and Produces for the status of a service it runs) and keeps only
// what those return: a worker cannot reach a value it did not declare, and
// the Graph is the role server's true dependency graph, logged at start
// and checked by New (no value read that nobody writes, no value with two
// writers, no name given twice). The role server runs each worker under
// its handle's name.
//
// A worker is a loop: wait on its inputs with its handle's Inputs ("until
// these values satisfy these predicates and one of them changed"), then
// act in plain sequential code. Every value a worker reacts to is one of
// those inputs: an input the worker did not declare makes its Wait fail,
// and no worker reads a value with a one-off event.Get. A worker asks
// which input changed through the input's typed handle (In.Changed), never
// by name. It returns an error when it cannot go on, and the supervisor
// restarts it; nothing is retried by hand. What a worker runs beside its
// loop (the consensus member, the curator, the kubelet, the pod network)
// runs as its supervised children (supervisor.Run), never as bare
// goroutines, so that the supervisor stops them when the worker's run
// ends; the one order among them is the control plane's, whose consensus
// member outlives the curator that uses it (memberusers.go). The Graph
// records each worker's last reaction (Graph.Workers).
//
// # Who provides data to whom
//
// Each worker's reads and writes, and each value's writer and readers, as
// the workers' constructors declare them to the Graph that New builds
// (polisctl node graph shows the live Graph of a node). The tables are
// drawn from that Graph: TestDataFlowGolden fails when they are stale, and
// go test ./roleserve -run TestDataFlowGolden -update rewrites them.
//
//	worker            reads                                 writes
//	clusterdirectory  membership                            directory
//	clusternet        membership                            clusterPodRange, localPodRange,
//	                                                        networkPeers
//	controlplane      localRoles                            consensus.status,
//	                                                        consensusSnapshots, curator.status,
//	                                                        localControlPlane, localCurator
//	heartbeat         membership                            nothing
//	kubernetes        consensus.status, localControlPlane,  kube.controlplane.status, kubernetes
//	                  localRoles
//	kubernetesworker  clusterPodRange, localLabels,         clusternet.status, kube.dns.status,
//	                  localPodRange, localRoles,            kube.kubelet.status,
//	                  membership, networkPeers              kube.proxy.status, kubernetesWorker
//	membership        credentials, directory, localCurator  membership
//	rolefetch         membership                            localLabels, localRoles
//	statuspush        consensusSnapshots,                   nothing
//	                  dataClusterBound, kubernetes,
//	                  kubernetesWorker, localCurator,
//	                  membership
//
//	value                     written by           read by
//	clusterPodRange           clusternet           kubernetesworker
//	clusternet.status         kubernetesworker     nothing
//	consensus.status          controlplane         kubernetes
//	consensusSnapshots        controlplane         statuspush
//	credentials               enrolment (node/)    membership
//	curator.status            controlplane         nothing
//	dataClusterBound          databinding (node/)  statuspush
//	directory                 clusterdirectory     membership
//	kube.controlplane.status  kubernetes           nothing
//	kube.dns.status           kubernetesworker     nothing
//	kube.kubelet.status       kubernetesworker     nothing
//	kube.proxy.status         kubernetesworker     nothing
//	kubernetes                kubernetes           statuspush
//	kubernetesWorker          kubernetesworker     statuspush
//	localControlPlane         controlplane         kubernetes
//	localCurator              controlplane         membership, statuspush
//	localLabels               rolefetch            kubernetesworker
//	localPodRange             clusternet           kubernetesworker
//	localRoles                rolefetch            controlplane, kubernetes,
//	                                               kubernetesworker
//	membership                membership           clusterdirectory, clusternet,
//	                                               heartbeat, kubernetesworker,
//	                                               rolefetch, statuspush
//	networkPeers              clusternet           kubernetesworker
//
// Besides values, workers call the curator through the membership's
// connection: heartbeat (Heartbeat, at any curator) and statuspush
// (UpdateNodeStatus, at the leader) write nothing in the Graph, and
// clusternet publishes the node's WireGuard key (SetWireGuardKey) before
// it follows WatchNetworkPeers into localPodRange and networkPeers. A
// status named after its package (consensus.StatusName,
// curator.StatusName, the StatusName of kube/…) belongs to a service a
// worker runs: it exists only while the worker runs it, the worker
// declares it with Produces and waits on it itself (so "read by nothing"
// in the Graph), and the node API shows it.
//
// membership owns the one answer to "how do I reach a curator?": a
// connection per set of credentials over every curator it knows of (the
// local curator, when one serves on this node, and the directory), which
// sends mutations to the leader and spreads reads and watches over all
// of them (curator/client): rolefetch's Watch of the node's own record,
// clusterdirectory's WatchClusterDirectory (which carries the curators
// only, so another node's role change never reaches this node) and
// heartbeat's calls land on any curator, statuspush's reach the leader.
// The loops (membership reads the directory and the local curator, which
// depend on it) are broken at start, from disk: clusterdirectory
// publishes the directory it saved (empty on a node that has none; a
// bootstrapping node reaches its own curator), and rolefetch publishes the
// roles it saved, so that a lone control-plane node starts its control
// plane, and with it the curator everything else waits for, before it can
// reach any curator.
//
// A decommissioned node never sees its record without roles: the curator
// clears the roles and refuses the node in one write. rolefetch takes that
// refusal (curator.IsNodeDecommissioned) as "no roles, for good": it saves
// and publishes empty roles, which stops the control plane, logs why, and
// stops asking; heartbeat, statuspush and clusternet stop asking too
// (stopIfDecommissioned) instead of being refused and restarted forever.
//
// # The local curator
//
// localCurator is "the curator on this node serves, here": controlplane sets
// it to nil when it starts, publishes the curator's endpoint only once the
// curator's Status is set (it serves), sets it back to nil when the curator
// stops serving, and withdraws it with supervisor.Cleanup when the control
// plane stops, however its run ends. Its readers (membership, statuspush)
// never wait for it to serve: nil is an answer ("no local curator"), and a
// local curator that does not serve leaves a working membership alone.
// localControlPlane, the handles on the running services, follows the same
// rule (withdrawn when the run ends); it is for the node agent and its
// tests, and for the kubernetes worker, which takes the consensus member
// from it and waits on that member's own status.
//
// controlplane also runs the member's consensus.Snapshotter, which keeps
// periodic snapshots beside the member's data as the cluster's policy
// (curator.SnapshotPolicy) says, and publishes their list as
// consensusSnapshots (nil while no member runs, withdrawn like the rest),
// which statuspush reports for polisctl node describe.
//
// # What it does not do
//
// The role server does not enrol the node: credentials come from outside
// (bootstrap, registration, or rejoining after a reboot).
//
// # Kubernetes
//
// Two workers, one per role, each only waiting and reporting status; how
// the Kubernetes parts are assembled lives in kube/. The kubernetes worker
// runs the control plane (kube/controller: kube-apiserver,
// kube-controller-manager, kube-scheduler from the bundle, the apiserver
// confined to the consensus namespace "kubernetes" through an etcd proxy,
// the PKI the cluster's) while the node holds KubernetesController, over
// the local consensus member. The kubernetesworker worker runs the
// Kubernetes node (kube/kubelet: containerd, then kubelet; beside them
// kube-proxy, kube/proxy, and the node's DNS server, kube/dns) while the
// node holds KubernetesWorker, the node agent was given a container
// runtime (KubernetesConfig.Runtime: the system disk, in a VM) and the
// machine has cgroup v2; it asks the curator for their certificates
// (keys made on the node) and renews them at half their life. On a VM
// node kube-proxy and the DNS server run in cgroups of their own below
// KubernetesRuntime.ServicesCgroup, a sibling of the kubelet's cgroup
// weighted below it (kube/nodeservice says why), so that the kubelet
// starts first when the CPU is short. Each
// status tells what runs (and whether the apiserver is ready, whether the
// Node is Ready) and why a held role is not run: no bundle, no runtime
// (process mode), no cgroup v2, waiting for a curator or for the node's
// pod range; statuspush reports both to the curator as
// NodeStatus.kubernetes.
//
// The pod network: the clusternet worker publishes the public half of
// the node's WireGuard key (the private half made and kept on the node's
// data disk, clusternet.LoadOrCreateKey) and follows the curator's
// WatchNetworkPeers stream into localPodRange (the node's own range,
// which the curator gives with KubernetesWorker; the kubernetesworker
// worker waits for it and hands it to the CNI configuration and the
// kubelet) and networkPeers (every other worker's address, range and key).
// While it runs the kubelet, the kubernetesworker worker also runs
// clusternet.Run over networkPeers: a WireGuard device with one peer per
// other worker and a route to each one's pod range through it, so that
// Pods reach Pods on every node, encrypted between nodes. The device and
// routes outlive a run that ends with the role held, and with them the
// rest of what running the node leaves on the machine (kube-proxy's and
// portmap's nftables tables, the Pods' bridge, CNI's state): whenever the
// kubernetesworker worker finds the role not held, however the last run
// ended, it removes them (clusternet.Clear and the rest), each failure in
// its status and tried again.
package roleserve
