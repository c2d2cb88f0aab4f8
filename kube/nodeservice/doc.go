// Package nodeservice runs one Kubernetes node service of a worker node
// beside the kubelet: a process of the system disk whose configuration
// and credentials Polis renders into files (kube/proxy for kube-proxy,
// kube/dns for the node's DNS server).
//
// # Model
//
// A Runner is given a Spec: the files to write (PEM keys and kubeconfigs
// 0600) and the command to run. Its Run writes the files, each to a
// temporary name and renamed so that the process never reads half of one,
// then runs the command as a supervised child process (kube/process): its
// lines go to the node's log under the runnable's name, it is restarted
// with backoff when it exits, and stopped (TERM, then KILL of its process
// group) when the run's context ends. Renew rewrites the files (new
// credentials) and stops the process, which its runnable starts again to
// read them. Status says whether the process runs, its pid, how often it
// started, and how it last ended.
//
// # Its cgroup
//
// Given Spec.Cgroup (a worker node's services get one each below
// /sys/fs/cgroup/kube-services), a run makes that cgroup v2 directory and
// starts the process in it (clone3 with the directory opened, so it never
// runs elsewhere), and removes it when the run ends. The parent, which
// the services share, is a sibling of the node's own cgroup (polis/) and
// of the kubelet's (kubernetes/), and gets a cpu.weight of CPUWeight
// against their default 100. cgroup v2 weights only share the CPU among
// siblings, so this is where the weight must be: under contention (one
// slow CPU while the node starts) the kubelet and containerd get four
// times the services' share and the Node is Ready sooner; an idle CPU is
// the services' all the same. Not below kubernetes/: the kubelet's runner
// waits for that whole tree to be empty when it stops, and the services
// are not its to stop; not below polis/: there they would take the CPU
// from the agent alone. A run logs WeightedMessage with its cgroup.
// Without the cpu controller enabled for the parent (a host where PID 1
// did not delegate it), the process runs in its cgroup unweighted and the
// run logs why instead, once; a cgroup that cannot be made fails the run,
// whose status says so.
//
// # What it does not do
//
// It renders nothing itself but what every service shares, the check of
// how it reaches the apiserver and its kubeconfig (apiclient.go);
// kube/proxy and kube/dns render the rest, as pure functions that their
// tests check. It decides nothing about when a service runs (the
// kubernetes worker of roleserve does), and keeps no state across runs.
package nodeservice
