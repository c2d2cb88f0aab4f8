package consensus

import (
	"context"
	"fmt"
	"io"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Snapshot is a consistent copy of the whole key space, as etcd streams it
// (see Status.Snapshot).
type Snapshot struct {
	// Revision is etcd's revision when the snapshot was taken, or just
	// before: the snapshot holds at least this revision.
	Revision int64
	// EtcdVersion is the version of the member that took it.
	EtcdVersion string
	// Data is etcd's snapshot format: the member's bbolt database
	// followed by its SHA-256. The caller must Close it.
	Data io.ReadCloser
}

// Snapshot streams a consistent snapshot of this member's database: the
// whole key space, internal keys and every namespace, which is why it is a
// method here and not on the namespaced clients. It holds everything this
// member has applied; callers that need every acknowledged write first do
// a linearizable read (the curator fences its node view) on this member.
func (s *Status) Snapshot(ctx context.Context) (*Snapshot, error) {
	m, err := s.running()
	if err != nil {
		return nil, err
	}
	// etcd does not fill in the revision of the snapshot stream's header,
	// so read this member's revision first: the snapshot, taken after,
	// holds at least that one.
	at, err := m.cli.Get(ctx, internalPrefix, clientv3.WithSerializable(), clientv3.WithCountOnly())
	if err != nil {
		return nil, fmt.Errorf("reading the revision before a snapshot: %w", err)
	}
	rev := at.Header.Revision
	resp, err := m.cli.SnapshotWithVersion(ctx)
	if err != nil {
		return nil, fmt.Errorf("taking an etcd snapshot: %w", err)
	}
	if resp.Header != nil && resp.Header.Revision > rev {
		rev = resp.Header.Revision
	}
	return &Snapshot{Revision: rev, EtcdVersion: resp.Version, Data: resp.Snapshot}, nil
}
