// Package launch starts a Polis cluster of node-agent processes on one
// machine, for development and for the end-to-end tests: N polis-node
// processes, each on its own loopback address with its own storage
// directory, the first bootstrapping the cluster and the others registering,
// approved by the owner whose credentials the launcher keeps in a polisctl
// configuration directory. Every node starts at once, so that their boots
// overlap (a VM's kernel takes seconds under TCG): the launcher chooses the
// cluster's register ticket, the first node bootstraps with it, and the
// others register with it through the first node's curator, which they
// wait for and which proves it knows the ticket before they trust its CA
// (their parameters cannot carry a CA that does not exist yet). Each node
// then goes through its own steps (registered, approved, UP, consensus
// member) as soon as it is ready, not in lockstep with the others: under
// TCG one VM may boot seconds before another.
//
// # Why processes, and why this package drives them like an operator
//
// A cluster in one test process (node/cluster_test.go) is quick, but it shares
// one address space, one scheduler and one set of globals between nodes, and
// it cannot be killed half-way through a write. Separate processes can: kill
// -9 means what it means on a real machine, and a restarted process has only
// its storage to go on. The launcher does what an operator would, through
// the same interfaces: node parameters files for polis-node, then
// ownerdir.TakeOwnership and the Management API with the owner's certificate.
// It uses no back door into the nodes, so a cluster it brings up proves that
// the operator's path works.
//
// # Addresses and ports
//
// Every node gets its own loopback address (127.77.0.1, .2, ... by default;
// Linux routes all of 127.0.0.0/8 to the loopback interface) and the default
// ports (roleserve.DefaultConsensusPort, DefaultCuratorPort), so no port is
// ever picked at random and a cluster's addresses say which node is which.
// Launch checks that the ports are free before it starts anything: two
// clusters on the same addresses fail at once with a clear message, instead
// of one node joining the wrong cluster.
//
// # Processes
//
// Node processes are children of the launcher, in a process group of their
// own (a Ctrl-C in the terminal reaches only the launcher, which then stops
// them in order), and on Linux they get SIGKILL when the launcher dies
// (Pdeathsig), so none is left behind even if the launcher is killed; a
// node that reboots (polisctl node reboot execs the agent again) arms that
// signal again itself, told the launcher's PID by LauncherPIDEnv. Close
// sends SIGTERM, waits, and sends SIGKILL to those that do not stop in time.
//
// # VMs
//
// With Options.VM the nodes are qemu VMs booting the node image
// (vmnode.go, launch/vm) on a switch the launcher owns, and the same Node
// handles start, stop and kill them. The options a node process gets as
// flags (ports, lease, heartbeat) go on each VM's kernel command line;
// parameters go through fw_cfg only until the node is UP (the launcher
// then removes its copy, so no later boot gets the register ticket). A VM
// whose guest reboots (the node API's Reboot) is booted again, as a
// machine's firmware would. Cut, Isolate and Reconnect partition the
// network; DialThrough is the owner's connection as seen from one node's
// side of a partition.
//
// # Kubernetes in VMs
//
// With Options.Kubernetes too (kubernetes.go), the image gets a system
// disk made from the node's system tree (launch/systembuild, built once
// into systembuild.OutDirForTests, or VMOptions.SystemDir), every VM gets
// vm.KubernetesMemoryMB and vm.KubernetesCPUs, the first node
// KubernetesController and the others KubernetesWorker; Launch returns
// once the workers' Nodes are Ready. Options.Images (polis-launch --image REF=PATH) are served from a
// registry inside the launcher on its address on the switch (registry.go),
// and every node is told, on its kernel command line, to pull their
// registry hosts from it. launch/demoimage builds the demo image
// (cmd/polis-demo) the README and the tests use.
//
// # Growing and recovering a running cluster
//
// AddNodes adds nodes to a running cluster with its current register
// ticket, as an operator adds machines (addnodes.go). RecoverSingleMember
// brings back a cluster that lost the quorum of its consensus members on
// a survivor, started once in recovery mode: a process with
// --recover-single-member, a VM with polis.recover-single-member=true on
// its kernel command line (recovery.go). With Options.RestoreBackup the
// first node restores a backup onto fresh storage instead of
// bootstrapping; a VM gets the backup decrypted on the host, the snapshot
// alone, through fw_cfg (restore.go, restorevm.go).
//
// # Files
//
// launch.go is the Cluster and Launch; options.go the Options and their
// checks; form.go forming the cluster (startAll, bootstrap, addNodes,
// consensus members, the owner's curators); queries.go what the launcher
// asks the curators as the owner (ListNodes, WaitHealthy, Leader);
// parameters.go the nodes' parameters files; machine.go the machine a
// node runs on, its kind (the platform) chosen once in Launch; process.go
// a node's handle and the process machine; vmnode.go the VM machine and
// the VM cluster's network (switch, proxy, cuts).
//
// # What it does not do
//
// It does not restart nodes that die: a dead node is reported, and the
// caller (a test, or the person at the terminal) decides.
package launch
