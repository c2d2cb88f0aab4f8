// Package ownerdir is the owner's configuration directory, and what is done
// with it: taking ownership of a cluster (TakeOwnership), dialling its
// curators as the owner (Dial), and reaching them through a proxy
// (SaveProxy). polisctl's commands, the launcher and the whole-cluster
// tests share it, so that none of them needs the command line to act as
// the owner.
//
// # The configuration directory
//
// Everything the owner's tools know about a cluster lives in one directory
// (polisctl's DefaultConfigDir, or --config): the owner's private key
// (key.der, PKCS#8, 0600, in a 0700 directory), the owner certificate the
// cluster issued for it (certificate.der), the cluster CA certificate it
// pinned (ca.der), the curators to ask (cluster.json, a ClusterDirectory in
// protojson, editable by hand when the cluster moves), and, for a cluster
// reached through a proxy, that proxy (proxy). One directory is one
// cluster: to manage two, give each its own directory. Open names the
// files; each is written atomically.
//
// # Trust on first use
//
// An operator who takes ownership knows the owner key and a curator's
// address, but not the cluster CA: it is created when the first node
// bootstraps. So TakeOwnership does what ssh does with host keys. It asks a
// curator for the CA (GetCACertificate, which anyone may call), shows its
// SHA-256 fingerprint, and pins it once the operator accepts. From then on
// every connection checks the curators against the pinned CA, and a later
// TakeOwnership that meets a different CA is refused (CAMismatchError),
// saying which fingerprints differ and how to recover. Whoever can compare
// the fingerprint with the one the cluster shows (the node's log, the
// launcher's output) closes the window that the first connection leaves.
package ownerdir
