// Package diskseal is the format of a node's encrypted data disk: a small
// header of our own at the start of the disk, and how the disk's key is
// kept in it under the parts it is split into.
//
// # The model
//
// The data disk starts with two header slots of HeaderSize each, then
// unused space up to DataOffset (1 MiB, so the encrypted area is aligned
// for any disk), then the encrypted area that PID 1 maps through dm-crypt
// (internal/devmapper) and formats as ext4. A header holds no secret in
// clear:
//
//   - a magic and a version, so that a disk of ours is told from a blank
//     disk or another file system;
//   - how the local part is sealed (Sealing: TPM or software) and whether
//     the key also needs the cluster part (ClusterBound);
//   - whether the encrypted area was formatted (State): a first boot
//     writes the header as StateFormatting before it formats, and
//     StateReady once the file system is synced, so a machine that
//     crashed while formatting formats again, and a ready disk is never
//     formatted;
//   - a generation, the salt of the key-encryption key, the wrapped data
//     key and the sealed local part;
//   - a SHA-256 of all of the above, so that a damaged header is a
//     *DamagedError that says so, never a wrong key silently tried.
//
// # The key, wrapped
//
// The data key (the dm-crypt key) is random, made at the disk's first
// boot and never changed. The header holds it wrapped (AES-256-GCM) under
// a key-encryption key, HKDF-SHA256 over the local part (sealed by the
// machine's TPM) and, once the disk is bound to its cluster, the cluster
// part (which the curator keeps for the node and hands only to it). A
// new salt per wrap makes every key-encryption key unrelated to the
// others, and the wrap is bound to the header's flags (Sealing,
// ClusterBound), so a header whose flags were changed does not open.
//
// Why wrapped rather than derived: a new node formats its disk at its
// first boot, before it has enrolled, when no curator knows it and there
// is no cluster part to ask for. The disk starts unbound (the local part
// alone opens it), and once the node is an UP member that does not run
// consensus, the node agent binds it (Wrap with the cluster part): one
// header rewrite, never a re-encryption. A node made a consensus member
// unbinds its disk the same way before its etcd member starts, since a
// cold start must unlock a quorum of members before any curator runs
// (docs/threat-model.md, "Data at rest").
//
// # Rewrites are atomic
//
// A rewrite (the state, a binding) goes to the slot not in use, with the
// next generation, and is synced before the old slot is wiped: a crash
// in the middle leaves the old slot whole, and Read takes the whole slot
// of the highest generation. After a crash between the sync and the
// wipe, both slots are whole and Read says so (Found.Stale): the writer
// wipes the older one, since an unbound wrap left beside a bound one
// would open the disk without the cluster part.
//
// # What it does not do
//
// It does not seal (a localstorage.Sealer does, chosen by the caller), does
// not talk to the device-mapper or the curator, and never writes a disk:
// Encode, Decode and Read work on bytes; PID 1 reads and writes them.
// Overwriting a slot destroys the old wrap on a disk that writes in
// place; flash or copy-on-write storage beneath may keep the old block.
package diskseal
