// Package controlplane runs a Kubernetes control plane on one node: the
// bundle's kube-apiserver, kube-controller-manager and kube-scheduler, each
// as a supervised child process.
//
// # Model
//
// A Runner is given everything from outside: the bundle's path
// (kube/bundle), the node's component files (kube/pki), the node's address,
// and the etcd endpoint, which is a confined one (kube/etcdproxy), never the
// cluster's etcd itself. Its Run is a supervisor.Runnable that writes the
// files into a private directory and starts one child runnable per
// component and one that probes the apiserver's /readyz:
//
//	Run ─┬─ apiserver           polis-kube apiserver ...
//	     ├─ controller-manager  polis-kube controller-manager ... (once ready)
//	     ├─ scheduler           polis-kube scheduler ... (once ready)
//	     ├─ readyz              GET https://address:port/readyz
//	     └─ rbac                the node services' RBAC, applied when ready
//
// The controller-manager and the scheduler start once the apiserver has
// first answered /readyz ok: they need it for everything, and started
// beside it they took the CPU of its start on a slow machine (an emulated
// one under load), which its post-start hooks' fixed deadlines do not
// forgive. Once started, they stay through the apiserver's restarts.
//
// A component runnable starts its process, logs each line it writes on the
// runnable's logger (so the node's log names the component; klog's
// severity letter picks the level), and fails when the process exits, so
// the supervisor restarts that component alone, with backoff. When its
// context ends it stops the process (SIGTERM to its process group, SIGKILL
// after StopGrace) and returns only once the process is gone: when Run has
// returned, no component process is left. The processes are also killed by
// the kernel if the node agent dies (Pdeathsig).
//
// With Config.Cgroup (on a node image, where the agent is PID 1 and owns
// the cgroup tree), each component runs in a cgroup v2 directory of its
// own below it, named after it: the apiserver is most of a controller's
// idle CPU, and the node's metrics can only say so when its processes are
// accounted apart from the agent's (and its embedded etcd's). The
// cgroups set no limits, and stay, empty, when the components stop (the
// next start uses them again).
//
// Kubernetes' bootstrap policy knows the components and kube-proxy
// (system:kube-proxy), not the node DNS server that every worker runs
// (kube/dns): once the apiserver is ready, and again after each of its
// restarts, the rbac runnable applies (server-side apply, so every
// controller node may) a ClusterRole polis:dns that lists and watches
// Services, EndpointSlices and Namespaces, bound to the user pki.DNSUser.
// A failed apply is tried again until it succeeds, ready or not: without
// it every node DNS server is refused.
//
// Status is a value telling the truth: which components run (with their
// pids and how often each started) and whether the apiserver's /readyz
// answers ok (asked as pki.ReadyzProbeUser, in no group: Kubernetes lets
// every user read its health; a named one keeps its connection, see
// probeClient).
//
// # What it does not do
//
// It does not decide whether the node should run Kubernetes (the kubernetes
// worker does, from the node's roles), create or keep the PKI (kube/pki
// keeps it in etcd; the kubernetes worker passes the node's files), or run
// a kubelet.
package controlplane
