// Package polisctl is the operator's command line for a Polis cluster, and
// the library behind it (Command). What it shares with the launcher and the
// tests, the owner's configuration directory, taking ownership with trust on
// first use and dialling the curators as the owner, is package ownerdir.
//
// # The configuration directory
//
// Everything polisctl knows about a cluster lives in one directory
// (DefaultConfigDir, or --config), laid out and pinned as ownerdir
// describes: the owner's key and certificate, the cluster CA pinned on
// first use like an ssh host key, the curators to ask, and the proxy to
// reach them through, if any. One directory is one cluster: to manage two,
// give each its own directory.
//
// # Commands
//
//	take-ownership   owner key → owner certificate, saved in the directory
//	cluster info     the curators and the CA fingerprint; saves the curators
//	node list        every node: state, roles, address, health (-o json)
//	node describe    one node in full (-o json)
//	node approve     admit a NEW node
//	node add-role    give a role; node remove-role takes it away
//	node label       set (key=value) and remove (key-) labels
//	node decommission, node delete
//	node watch       print nodes as they change (polls ListNodes)
//	ticket           the register ticket, or node parameters for a new node
//	ticket rotate    replace the register ticket; the old one registers nobody
//	owner rotate-key replace the owner key, revoking its certificates
//	kubeconfig       a kubeconfig for the cluster's Kubernetes, with a key
//	                 made here and a day-long certificate the cluster signs
//	kube-proxy       a loopback relay to whichever apiserver answers, for
//	                 the kubeconfig's polis-proxy context (a kubeconfig
//	                 context names one server)
//	cluster backup   a backup of the cluster state to a file, encrypted to
//	                 the owner key; backup --inspect reads one offline
//	node logs, node services, node graph, node reboot, node poweroff
//	                 over a node's own API (nodeapi.go)
//
// The commands call the curators as the owner (as ownerdir.Dial does, but
// failing at once when every curator refused the connection:
// client.Config.FailFast), and the curator client routes each call by its
// method's declaration: changes to the leader, reads (node list, describe,
// cluster info) to any curator. take-ownership calls a curator as a key
// holder; the node API's commands ask a curator where the node is and then
// call the node itself; backup --inspect calls nothing. Errors say what
// went wrong and what to do next; gRPC status codes are translated into
// that (see explain), and the node API's commands blame the node, not a
// curator (explainNodeAPI).
package polisctl
