package backup

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
)

// The parts of etcd's storage that Summarize reads: the "key" bucket holds
// every kept revision of every key, under a 17-byte revision (8 bytes main
// revision, '_', 8 bytes sub revision, big-endian) with a trailing 't' for
// a deletion, each value an mvccpb.KeyValue.
var keyBucket = []byte("key")

const (
	revBytes     = 17
	tombstoneTag = 't'
)

// nodesPrefix is where the curator keeps node records in the whole key
// space: its namespace (consensus.ClientFor("curator")) and its node prefix.
const nodesPrefix = "/namespace/curator/nodes/"

// Summary is what a snapshot's database holds.
type Summary struct {
	// Revision is the database's latest revision.
	Revision int64
	// Keys is how many keys are live at Revision.
	Keys int
	// Nodes is how many node records the curator keeps.
	Nodes int
	// Size is the database's size in bytes.
	Size int64
}

// Summarize reads a snapshot's database (as Decrypt writes it) offline,
// read-only, and counts what it holds. It fails for a file that is not an
// etcd database. bbolt maps the file into memory, so a damaged page can
// crash the process: Decrypt's checks catch damage in transit, but anyone
// holding the owner's public key can make a backup, so callers check the
// file first (consensus.CheckSnapshotDatabase, in a child process).
func Summarize(dbPath string) (*Summary, error) {
	db, err := bolt.Open(dbPath, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return nil, fmt.Errorf("%w: opening the snapshot's database: %v", ErrDamaged, err)
	}
	defer db.Close()
	var sum Summary
	err = db.View(func(tx *bolt.Tx) error {
		sum.Size = tx.Size()
		b := tx.Bucket(keyBucket)
		if b == nil {
			return fmt.Errorf("%w: the database has no %q bucket: not an etcd snapshot", ErrDamaged, keyBucket)
		}
		// Revisions come in order, so the last word on each key wins.
		live := map[string]bool{}
		err := b.ForEach(func(k, v []byte) error {
			if len(k) < revBytes {
				return fmt.Errorf("%w: a revision key of %d bytes", ErrDamaged, len(k))
			}
			sum.Revision = max(sum.Revision, int64(binary.BigEndian.Uint64(k[:8])))
			var kv mvccpb.KeyValue
			if err := proto.Unmarshal(v, &kv); err != nil {
				return fmt.Errorf("%w: a key at revision %d: %v", ErrDamaged, binary.BigEndian.Uint64(k[:8]), err)
			}
			live[string(kv.Key)] = !(len(k) > revBytes && k[revBytes] == tombstoneTag)
			return nil
		})
		if err != nil {
			return err
		}
		for k, ok := range live {
			if !ok {
				continue
			}
			sum.Keys++
			if bytes.HasPrefix([]byte(k), []byte(nodesPrefix)) {
				sum.Nodes++
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &sum, nil
}
