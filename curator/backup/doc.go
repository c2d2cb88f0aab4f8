// Package backup is the file a cluster backup is kept in, and what can be
// learnt from one offline.
//
// A backup is a snapshot of the cluster's etcd, the whole key space: the
// cluster CA and its key, the register ticket, every node's record. Since it
// holds the cluster's secrets it is only ever written encrypted, to the
// owner key: a backup file is an age file (filippo.io/age) with one
// ssh-ed25519 recipient derived from the owner's ed25519 key, so only the
// owner key opens it, and age's authenticated stream refuses a file that was
// damaged or cut short. Inside, the plaintext is
//
//	polis-backup v1\n            the format line
//	{...}\n                      Info, one line of JSON
//	snapshot                     etcd's snapshot format: bbolt db + SHA-256
//
// The snapshot keeps etcd's own trailing SHA-256 of the database, checked
// both when the backup is written (so a stream cut short by the curator is
// never saved as a backup) and when it is read. Summarize reads a snapshot's
// database offline with bbolt, without starting etcd.
package backup
