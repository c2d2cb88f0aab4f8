package consensus

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/internal/atomicfile"
	"github.com/polis-os/polis/supervisor"
)

// Defaults of SnapshotPolicy: a snapshot an hour, the last six kept, so a
// member's disk holds the last six hours at the cost of six copies of the
// database.
const (
	DefaultSnapshotInterval = time.Hour
	DefaultSnapshotKeep     = 6
)

// MaxSnapshotKeep bounds SnapshotPolicy.Keep: every snapshot is a full
// copy of the database, and the node reports its list in its status.
const MaxSnapshotKeep = 16

// SnapshotPolicy says how often a member writes a snapshot of its
// database to its own disk and how many it keeps.
type SnapshotPolicy struct {
	// Interval between two snapshots; DefaultSnapshotInterval if zero.
	Interval time.Duration
	// Keep is how many snapshots are kept, the newest; older ones are
	// removed. DefaultSnapshotKeep if zero; at most MaxSnapshotKeep.
	Keep int
}

// withDefaults returns p with its zero fields set to the defaults and Keep
// capped to MaxSnapshotKeep.
func (p SnapshotPolicy) withDefaults() SnapshotPolicy {
	if p.Interval <= 0 {
		p.Interval = DefaultSnapshotInterval
	}
	if p.Keep <= 0 {
		p.Keep = DefaultSnapshotKeep
	}
	p.Keep = min(p.Keep, MaxSnapshotKeep)
	return p
}

// SnapshotFile is one snapshot a member wrote to its disk.
type SnapshotFile struct {
	// Path is the file's path. The file is in etcd's snapshot format
	// (the database followed by its SHA-256), what `etcdutl snapshot
	// restore` reads.
	Path string
	// Time is when it was taken, by this node's clock, to the second.
	Time time.Time
	// Revision is the etcd revision it holds at least.
	Revision int64
	// Size is the file's size in bytes.
	Size int64
}

// SnapshotterConfig describes a Snapshotter.
type SnapshotterConfig struct {
	// Status is the member's status: snapshots are taken while it runs
	// as a voter.
	Status event.ValueWatch[*Status]
	// Dir is where the snapshots are kept, on the member's data disk. It
	// is created (0700) if missing and holds nothing else.
	Dir string
	// Policy returns the cluster's snapshot policy, read before each
	// snapshot so that every member follows the one the cluster records.
	// While it fails, the last policy read (at first the defaults) is
	// used. Nil means the defaults.
	Policy func(ctx context.Context) (SnapshotPolicy, error)
	// Publish, if set, is called with the snapshots on disk, newest first,
	// when the Snapshotter starts and after each change.
	Publish func([]SnapshotFile)
	// Now is the clock, for tests; time.Now if nil.
	Now func() time.Time
}

// Snapshotter keeps periodic snapshots of a member's database on the
// member's own disk: the raw material of a recovery when every other
// member, and every backup, is lost. It is a supervised runnable beside
// the Service (Run).
//
// Each snapshot is written to a temporary file (0600: the database holds
// the cluster's CA keys), synced, checked against the SHA-256 etcd streams
// after the database, and only then renamed to its final name; the
// directory is synced after the rename and after pruning. A crash leaves
// at worst a temporary file, which the next Run removes: a file with a
// snapshot's name is always complete.
type Snapshotter struct {
	cfg SnapshotterConfig
}

// NewSnapshotter checks cfg and returns a Snapshotter ready to Run.
func NewSnapshotter(cfg SnapshotterConfig) (*Snapshotter, error) {
	if cfg.Status == nil {
		return nil, errors.New("snapshotter: the Status field is required")
	}
	if cfg.Dir == "" {
		return nil, errors.New("snapshotter: the Dir field is required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Snapshotter{cfg: cfg}, nil
}

// Snapshot files are named snapshot-<UTC time>-r<revision>.db, so that
// their names sort by time and say what they hold; temporary files start
// with a dot and end in .tmp.
const (
	snapshotPrefix     = "snapshot-"
	snapshotSuffix     = ".db"
	snapshotTimeLayout = "20060102T150405Z"
	snapshotTempPrefix = ".snapshot-"
	snapshotTempSuffix = ".tmp"
)

// snapshotRetry is how long after a failed snapshot the next attempt
// comes, unless the interval is shorter.
const snapshotRetry = 30 * time.Second

// Run takes a snapshot whenever the newest on disk is an interval old and
// the member runs as a voter, and prunes the oldest beyond the policy's
// count. It returns when ctx is cancelled; failures to take a snapshot are
// logged and retried, failures of the directory itself end Run.
func (s *Snapshotter) Run(ctx context.Context) error {
	logger := supervisor.Logger(ctx)
	if err := os.MkdirAll(s.cfg.Dir, 0o700); err != nil {
		return fmt.Errorf("snapshot directory: %w", err)
	}
	if err := os.Chmod(s.cfg.Dir, 0o700); err != nil {
		return fmt.Errorf("snapshot directory: %w", err)
	}
	if err := removeTemporary(s.cfg.Dir); err != nil {
		return err
	}
	files, err := ListSnapshots(s.cfg.Dir)
	if err != nil {
		return err
	}
	s.publish(files)
	supervisor.Signal(ctx, supervisor.SignalHealthy)

	w := s.cfg.Status.Watch()
	defer w.Close()
	policy := SnapshotPolicy{}.withDefaults()
	// Get waits for a voter's status; a later Get waits for a newer one
	// than the last seen, so it is called again only once Ready says the
	// status changed.
	st, err := w.Get(ctx, event.Filter(IsVoter))
	if err != nil {
		return err
	}
	for {
		policy = s.policy(ctx, logger, policy)
		wait := time.Duration(0)
		if len(files) > 0 {
			wait = files[0].Time.Add(policy.Interval).Sub(s.cfg.Now())
		}
		if wait > 0 {
			// Sleep until the next is due, waking if the member stops
			// (its newest status is then no longer a voter's).
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-w.Ready():
				t.Stop()
				if st, err = w.Get(ctx, event.Filter(IsVoter)); err != nil {
					return err
				}
				continue
			case <-t.C:
			}
			policy = s.policy(ctx, logger, policy)
		}
		f, err := s.take(ctx, st)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			retry := min(policy.Interval, snapshotRetry)
			logger.Warn("taking a periodic snapshot failed", zap.Error(err), zap.Duration("retry_in", retry))
			if err := sleepCtx(ctx, retry); err != nil {
				return err
			}
			// The member may have restarted: its old status's clients
			// are gone.
			select {
			case <-w.Ready():
				if st, err = w.Get(ctx, event.Filter(IsVoter)); err != nil {
					return err
				}
			default:
			}
			continue
		}
		logger.Info("periodic snapshot taken", zap.String("file", f.Path), zap.Int64("revision", f.Revision), zap.Int64("bytes", f.Size))
		if err := pruneSnapshots(s.cfg.Dir, policy.Keep); err != nil {
			return err
		}
		if files, err = ListSnapshots(s.cfg.Dir); err != nil {
			return err
		}
		s.publish(files)
	}
}

func (s *Snapshotter) publish(files []SnapshotFile) {
	if s.cfg.Publish != nil {
		s.cfg.Publish(files)
	}
}

// policy reads the cluster's policy, keeping last if it cannot.
func (s *Snapshotter) policy(ctx context.Context, logger *zap.Logger, last SnapshotPolicy) SnapshotPolicy {
	if s.cfg.Policy == nil {
		return last
	}
	p, err := s.cfg.Policy(ctx)
	if err != nil {
		logger.Warn("reading the cluster's snapshot policy failed; keeping the last one", zap.Error(err), zap.Duration("interval", last.Interval), zap.Int("keep", last.Keep))
		return last
	}
	return p.withDefaults()
}

// take writes one snapshot of st's member into the directory.
func (s *Snapshotter) take(ctx context.Context, st *Status) (*SnapshotFile, error) {
	snap, err := st.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	defer snap.Data.Close()
	return writeSnapshot(s.cfg.Dir, s.cfg.Now(), snap.Revision, snap.Data)
}

// writeSnapshot writes the snapshot stream r, taken at revision rev, to
// dir under its final name only once it is complete, synced and matches
// its hash; otherwise it leaves nothing behind.
func writeSnapshot(dir string, now time.Time, rev int64, r io.Reader) (*SnapshotFile, error) {
	at := now.UTC().Truncate(time.Second)
	name := filepath.Join(dir, snapshotName(at, rev))
	var n int64
	err := atomicfile.Write(name, snapshotTempPrefix+"*"+snapshotTempSuffix, 0o600, func(w io.Writer) error {
		h := &hashTail{h: sha256.New()}
		var err error
		n, err = io.Copy(io.MultiWriter(w, h), r)
		if err != nil {
			return fmt.Errorf("writing the snapshot: %w", err)
		}
		if !h.ok() {
			return fmt.Errorf("the snapshot etcd streamed (%d bytes) does not end with the SHA-256 of its database: not kept", n)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &SnapshotFile{Path: name, Time: at, Revision: rev, Size: n}, nil
}

// hashTail hashes everything written to it but the last sha256.Size
// bytes, which it keeps: etcd's snapshot stream is the database followed
// by its SHA-256.
type hashTail struct {
	h    hash.Hash
	tail []byte
}

func (t *hashTail) Write(p []byte) (int, error) {
	buf := append(t.tail, p...)
	if len(buf) <= sha256.Size {
		t.tail = buf
		return len(p), nil
	}
	cut := len(buf) - sha256.Size
	t.h.Write(buf[:cut])
	t.tail = append([]byte(nil), buf[cut:]...)
	return len(p), nil
}

// ok reports whether the stream held more than a hash and ended with the
// hash of what came before.
func (t *hashTail) ok() bool {
	return len(t.tail) == sha256.Size && bytes.Equal(t.h.Sum(nil), t.tail)
}

func snapshotName(at time.Time, rev int64) string {
	return fmt.Sprintf("%s%s-r%d%s", snapshotPrefix, at.UTC().Format(snapshotTimeLayout), rev, snapshotSuffix)
}

// parseSnapshotName is snapshotName's inverse; ok is false for any other
// name.
func parseSnapshotName(name string) (at time.Time, rev int64, ok bool) {
	rest, found := strings.CutPrefix(name, snapshotPrefix)
	if !found {
		return time.Time{}, 0, false
	}
	rest, found = strings.CutSuffix(rest, snapshotSuffix)
	if !found {
		return time.Time{}, 0, false
	}
	ts, r, found := strings.Cut(rest, "-r")
	if !found {
		return time.Time{}, 0, false
	}
	at, err := time.Parse(snapshotTimeLayout, ts)
	if err != nil {
		return time.Time{}, 0, false
	}
	rev, err = strconv.ParseInt(r, 10, 64)
	if err != nil || rev < 0 {
		return time.Time{}, 0, false
	}
	return at, rev, true
}

// ListSnapshots lists the snapshots in dir, newest first (by time, then
// revision). Files of other names are ignored; a missing dir holds none.
func ListSnapshots(dir string) ([]SnapshotFile, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing snapshots: %w", err)
	}
	var files []SnapshotFile
	for _, e := range entries {
		at, rev, ok := parseSnapshotName(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			return nil, fmt.Errorf("listing snapshots: %w", err)
		}
		files = append(files, SnapshotFile{Path: filepath.Join(dir, e.Name()), Time: at, Revision: rev, Size: info.Size()})
	}
	slices.SortFunc(files, func(a, b SnapshotFile) int {
		if c := b.Time.Compare(a.Time); c != 0 {
			return c
		}
		return int(b.Revision - a.Revision)
	})
	return files, nil
}

// pruneSnapshots removes all but the keep newest snapshots in dir.
func pruneSnapshots(dir string, keep int) error {
	files, err := ListSnapshots(dir)
	if err != nil {
		return err
	}
	if len(files) <= keep {
		return nil
	}
	for _, f := range files[keep:] {
		if err := os.Remove(f.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("pruning old snapshots: %w", err)
		}
	}
	return atomicfile.SyncDir(dir)
}

// removeTemporary removes what a crash mid-snapshot left in dir.
func removeTemporary(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("snapshot directory: %w", err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), snapshotTempPrefix) && strings.HasSuffix(e.Name(), snapshotTempSuffix) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("removing an unfinished snapshot: %w", err)
			}
		}
	}
	return nil
}
