// Package diskseal is the format of a node's encrypted data disk: a small
// header of our own at the start of the disk, and the derivation of the
// disk's key from the parts it is split into.
//
// # The model
//
// The data disk starts with one HeaderSize block, then unused space up to
// DataOffset (1 MiB, so the encrypted area is aligned for any disk), then
// the encrypted area that PID 1 maps through dm-crypt (internal/devmapper)
// and formats as ext4. The header holds no secret in clear:
//
//   - a magic and a version, so that a disk of ours is told from a blank
//     disk or another file system;
//   - how the local part is sealed (Sealing: TPM or software) and whether
//     the key also needs a cluster part (ClusterBound);
//   - whether the encrypted area was formatted (State): a first boot
//     writes the header as StateFormatting before it formats, and
//     StateReady once the file system is synced, so a machine that
//     crashed while formatting formats again, and a ready disk is never
//     formatted;
//   - the salt of the key derivation and the sealed local part;
//   - a SHA-256 of all of the above, so that a damaged header is a
//     *DamagedError that says so, never a wrong key silently tried.
//
// The data key is HKDF-SHA256 over the local part and the cluster part,
// with the header's salt: neither part alone gives the key, and a new salt
// per disk makes two disks' keys unrelated even with equal parts.
//
// # What it does not do
//
// It does not seal (a localstorage.Sealer does, chosen by the caller), does
// not talk to the device-mapper or the curator, and never writes a disk:
// Encode and Decode work on bytes; PID 1 reads and writes them.
package diskseal
