// Package polisctl is the operator's command line for a Polis cluster, and
// the library behind it: the launcher takes ownership of the clusters it
// starts with TakeOwnership and makes management calls through Dial.
//
// # The configuration directory
//
// Everything polisctl knows about a cluster lives in one directory
// (DefaultConfigDir, or --config): the owner's private key (key.der, PKCS#8,
// 0600, in a 0700 directory), the owner certificate the cluster issued for
// it (certificate.der), the cluster CA certificate it pinned (ca.der), and
// the curators to ask (cluster.json, a ClusterDirectory in protojson,
// editable by hand when the cluster moves). One directory is one cluster:
// to manage two, give each its own directory.
//
// # Trust on first use
//
// An operator who takes ownership knows the owner key and a curator's
// address, but not the cluster CA: it is created when the first node
// bootstraps. So polisctl does what ssh does with host keys. It asks a
// curator for the CA (GetCACertificate, which anyone may call), shows its
// SHA-256 fingerprint, and pins it once the operator accepts. From then on
// every connection checks the curators against the pinned CA, and a later
// take-ownership that meets a different CA is refused, saying which
// fingerprints differ and how to recover. Whoever can compare the
// fingerprint with the one the cluster shows (the node's log, the
// launcher's output) closes the window that the first connection leaves.
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
// The commands call the curators as the owner (as Dial does, but failing
// at once when every curator refused the connection:
// client.Config.FailFast), and the curator client routes each call by its
// method's declaration: changes to the leader, reads (node list, describe,
// cluster info) to any curator. take-ownership calls a curator as a key
// holder; the node API's commands ask a curator where the node is and then
// call the node itself; backup --inspect calls nothing. Errors say what
// went wrong and what to do next; gRPC status codes are translated into
// that (see explain), and the node API's commands blame the node, not a
// curator (explainNodeAPI).
package polisctl
