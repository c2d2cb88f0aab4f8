// Package identity gives Polis its identities: node keys and the node IDs
// derived from them, the cluster certificate authority kept in etcd, the
// certificates it issues to nodes and users, the self-signed certificates
// that prove a key the CA has not certified (yet), the mutual-TLS
// configurations of every connection to the curator, and the answer to
// "who is calling?" on the server side.
//
// # Why one package
//
// Authorization in the curator is only as good as the identity it starts
// from. If the rules that turn a certificate into "node X" or "user Y" were
// spread over the curator, the node agent and polisctl, they would drift,
// and the classic failures follow: a certificate of one kind accepted as
// another, a self-signed certificate taken at its word, a name checked by a
// regular expression that matches a part of it. Here one function,
// [Verifier.Identify], makes that decision, and the TLS configurations and
// gRPC credentials are built around it, so every server decides the same
// way.
//
// # Keys and IDs
//
// Every node, user and the CA has an ed25519 key ([GenerateKey]). A node's
// public key is its identity; its ID is derived from it by [NodeID]:
// "node-" and the first 96 bits of the key's SHA-256 in hexadecimal, for
// example node-3f2a0c9be41d7a0055e1c2b4. An ID never changes and is never
// reassigned; it fits wherever a name must go (certificates, DNS names,
// etcd member names and keys). [ValidateNodeID] and [ValidateUserName] use
// anchored expressions; user names may not start with "node-". The
// reasoning about collisions is at nodeIDBytes in names.go: in short, none
// by chance, none by effort, and nothing trusts an ID without its key.
//
// # The cluster CA
//
// A [CA] is a self-signed ed25519 certificate valid for [CALifetime] (20
// years) and its private key. It is created at bootstrap and stored in
// etcd, under [CAPrefix] in the curator's namespace ([EnsureCA]): the
// check that none exists and the write are one transaction, so two
// curators bootstrapping at once end up with the same CA, and a corrupt
// entry is reported ([ErrCorruptCA]), never overwritten.
//
// The CA's private key lives in etcd, in the clear. Every curator must be
// able to issue certificates, every control-plane node may run a curator,
// and etcd is the one store they share; so the key is exactly as well
// protected as etcd's data: its files on the control-plane nodes' disks,
// and the consensus package's peer TLS. Anyone who can read the curator's
// namespace can issue certificates. The key never leaves the control plane:
// nodes and users get only the CA certificate (in the register ticket, the
// cluster directory, or with their own certificate) and build a [Verifier]
// from it. This CA is not the consensus package's peer CA; the two are
// independent.
//
// # Certificates
//
// The CA signs end-entity certificates directly (no intermediates), each
// with a random 128-bit serial, backdated an hour for clock skew, and never
// outliving the CA:
//
//   - Node certificates ([CA.IssueNode]): CN the node ID, OU polis-node,
//     good for client authentication only, naming no host, valid for
//     [NodeCertificateLifetime] (one year). They prove "node X" to the
//     curator; a node's API serves with one only until it has its node API
//     certificate, and no client that verifies the host accepts it.
//   - Curator certificates ([CA.IssueCurator]): CN the node ID, OU
//     polis-curator, good for server authentication only, naming the node
//     ID as a DNS name and the addresses the curator serves on, valid for
//     [CuratorCertificateLifetime] (two hours). A curator issues one to
//     itself, only while its node's record holds ConsensusMember, and
//     renews it while it runs; it is the one certificate curator clients
//     accept from a server ([ServingCertificate] holds it on the server
//     side).
//   - Node API certificates ([CA.IssueNodeAPI]): CN the node ID, OU
//     polis-node-api, good for server authentication only, naming the node
//     ID as a DNS name and the address the node's record reports, valid for
//     [NodeAPICertificateLifetime] (30 days), for the node key. The curator
//     issues one beside every renewed node certificate; a node's own API
//     (the node API and /metrics) serves with it
//     ([NewNodeServingCertificate]), and stock TLS clients verify it with
//     the cluster CA as their only root ([NodeAPIClientConfig] is one).
//   - User certificates ([CA.IssueUser]): CN the user name, OU polis-user,
//     good for client authentication only, naming no host, valid for
//     [UserCertificateLifetime] (90 days).
//   - Ephemeral certificates ([EphemeralCertificate]): self-signed, with
//     the presenter's own key, by whoever must prove it holds a key but has
//     no valid certificate from the CA: a node registering, or joining after
//     its certificate expired while it was down; the owner taking
//     ownership. They convey that key and nothing else.
//
// Holders renew once two thirds of the validity period have passed
// ([NeedsRenewal], [RenewAt]); [CA.Renew] reissues node and user
// certificates for the same key and identity.
//
// # Who is calling
//
// The curator's server ([ServerConfig], or [ServerCredentials] for gRPC)
// asks for a client certificate and leaves its verification to
// [Verifier.Identify], run in the handshake of every connection, which
// decides between exactly four outcomes, matching the kinds of callers the
// curator's API declares:
//
//   - [KindAnonymous]: no certificate. Such a caller may only ask what is
//     not secret (which curator leads, which CA the cluster uses).
//   - [KindKeyHolder]: a certificate that the CA did not sign but its own
//     key did. The caller has proven it holds that key, and nothing more:
//     whatever its subject claims, it is not a node. What the key may do
//     (register with a ticket, join as a known node, take ownership) is the
//     curator's decision.
//   - [KindNode]: a node certificate from the CA, valid now, whose CN is the
//     node ID of its own key.
//   - [KindUser]: a user certificate from the CA, valid now.
//
// Anything else fails the handshake: a certificate from another CA, an
// expired or not yet valid one, one the CA signed but that is neither a
// well-formed node nor user certificate. The kinds cannot be confused:
// the OU says which kind a certificate is, and the rest of the certificate
// must agree (key usages, names), so a user certificate does not pass for a
// node even where its name would. A certificate that verifies against the
// CA is never reconsidered as self-signed; one that does not is at most a
// key holder. Every kind but the anonymous one carries the caller's proven
// public key ([Identity.HoldsKey]).
//
// Curator and node API certificates identify no caller: they are for
// servers only.
//
// Clients ([NodeClientConfig], [UserClientConfig], [KeyHolderClientConfig])
// trust the cluster CA and nothing else, and accept only servers with a
// curator certificate that names the node ID or address they dialled; a
// node certificate or node API certificate never passes for a curator.
// Clients of a node's own API ([NodeAPIClientConfig]) verify the server as
// a stock client does, with the node ID as the server name, and accept
// only a node API certificate. The one exception is the first contact
// with a curator, to fetch the CA ([FirstContactConfig]): it verifies
// nothing in the handshake and hands the caller the certificate served,
// to check against the CA the call sent (with a register ticket's proof,
// or the user's word). All connections are TLS 1.3.
//
// On the gRPC side, [PeerIdentity] returns the caller's [Identity] from a
// call's context, so that the curator's central permission check (each RPC
// declares the caller and permission it needs) starts from one value. A
// node may act only on itself: [Identity.IsNode].
//
// # What this package does not do
//
// It keeps no revocation list, by choice. A decommissioned or deleted
// node, or a removed user, keeps a client certificate that verifies until
// it expires; the curator, the only server that accepts such certificates,
// refuses such callers by its state on every call, so a certificate is
// necessary but never sufficient. The certificates clients must be able to
// refuse without asking anyone, curator certificates, are short-lived
// instead: a curator whose node leaves the control plane gets no new one,
// and its last expires within [CuratorCertificateLifetime]. A revocation
// list would have to be fetched from a curator before any curator could be
// trusted. See docs/threat-model.md.
//
// It decides no permissions, holds no state beyond the CA in etcd, and
// writes no files: persisting a node's key and certificate (0600, written
// atomically) is the node's local storage's business. It does not rotate
// the CA. Keys are ordinary in-memory keys: nothing is sealed to or held
// in a TPM.
package identity
