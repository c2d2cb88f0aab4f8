// Package localstorage describes, in one place, where a node keeps what.
//
// A node's storage has three parts with different lifetimes:
//
//   - ESP: what must be readable before anything else, and survives
//     reinstalls of the data disk: the node parameters it was started with,
//     its sealed configuration (the credentials to rejoin its cluster after a
//     reboot), and the cluster directory (where the curators were last
//     seen).
//   - Data: the node's state: etcd's data directory, the node's key and
//     certificates, and its last known roles. Secrets here are 0600 in 0700
//     directories.
//   - Ephemeral: runtime files (sockets) that mean nothing after a reboot.
//
// In a VM the three are mount points (the ESP partition, the data disk, a
// tmpfs); in development they are directories under one root. Either way a
// Root built by New names every file, so no other package composes a path
// of its own: there is one answer to "where is the node key?".
//
// Every write is atomic: the data goes to a temporary file in the same
// directory, is synced, and is renamed over the old file, and the directory
// is synced. A crash leaves the old content or the new, never a mix, and a
// reader never sees a half-written file; Root.Create removes the temporary
// files a crash leaves.
//
// Every stored byte is checked: a file is written behind a one-line header
// with the SHA-256 and size of its content, and Read refuses anything else
// (truncated, extended, a bit flipped, written by something else) with a
// CorruptError that names the file and says what to do about it. Damage
// is never mistaken for content: a flipped bit in the sealed configuration
// would otherwise make the node another node. Files other programs read
// (etcd's TLS files) are marked Plain and carry their own checks.
//
// Files written without the header, by the development builds from before
// it (there is no release before it), are refused like damaged ones, on
// purpose, and not migrated. Telling such a file from a file whose header
// was damaged can only be a guess (does the rest parse?), and a guess that
// accepts one would accept some damaged files too, forever, for storage
// that no released version ever wrote. The error says that a file without
// a header may be from such a build; the way out is the one for damage
// (remove the file and let it be rebuilt, or wipe the node's storage and
// enrol it again).
//
// Sealing: the sealed configuration is written through a Sealer, which
// binds it to the machine. TPMSealer seals with the machine's TPM 2.0 (a
// VM's swtpm): a copy of the file elsewhere is useless. Unsealed, for
// process mode and machines without a TPM, does not protect anything
// against a copy, and says so in its name and in every file it writes.
// Each writes a header of its own, so one never mistakes the other's
// data for its own.
package localstorage
