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
// # What it does not do
//
// It renders nothing itself but what every service shares, the check of
// how it reaches the apiserver and its kubeconfig (apiclient.go);
// kube/proxy and kube/dns render the rest, as pure functions that their
// tests check. It decides nothing about when a service runs (the
// kubernetes worker of roleserve does), and keeps no state across runs.
package nodeservice
