package curator

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	cpb "github.com/polis-os/polis/api/curator/v1"
	etcdvalue "github.com/polis-os/polis/event/etcd"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/supervisor"
)

// heartbeatPrefix holds one cpb.HeartbeatRecord per curator, under the
// node ID of the curator's node: the heartbeats that curator received
// within its recording window (see the package documentation, "Health").
const heartbeatPrefix = "heartbeats/"

func heartbeatKey(curator string) string { return heartbeatPrefix + curator }

// maxHeartbeatEntries bounds one record: at about 36 bytes an entry, a
// record of this many stays far below etcd's 1.5 MiB request limit.
const maxHeartbeatEntries = 20000

// maxHeartbeatRecordSize is the largest record a curator reads.
const maxHeartbeatRecordSize = 1 << 20

// heartbeatWindow is how long a curator keeps a node in its record after
// the node's last heartbeat: twice the timeout, so that a node that
// stopped is still listed, with the age that makes it HEARTBEAT_TIMEOUT,
// when a curator that never heard it starts.
func heartbeatWindow(interval time.Duration) time.Duration {
	return 2 * heartbeatTimeout(interval)
}

// staleRecordAge is how old a record may be before any curator deletes it:
// its curator stopped long ago (records are rewritten every interval
// while their curator hears anything), and every node it lists has long
// timed out.
func staleRecordAge(interval time.Duration) time.Duration {
	return 10 * heartbeatTimeout(interval)
}

// heartbeatBook is one curator's knowledge of heartbeats: those it received
// itself, exact to the moment, and those every curator recorded in etcd,
// at most one interval late. Every curator keeps one and judges health
// from it alike (health.go).
type heartbeatBook struct {
	client   *clientv3.Client
	self     string // this curator's node ID: the key it writes
	interval time.Duration
	now      func() time.Time
	source   *etcdvalue.Range[*cpb.HeartbeatRecord]
	// loaded is closed once the records were first read.
	loaded   chan struct{}
	loadOnce sync.Once

	mu sync.Mutex
	// own is when this curator last received a heartbeat from each node.
	own map[string]time.Time
	// unwritten says that own holds a heartbeat the stored record lacks.
	unwritten bool
	// recorded is the newest heartbeat of each node in any record read,
	// kept after the record drops it, so that the age of a node that
	// stopped stays known.
	recorded map[string]time.Time
	// since is when the records were first read: a node in none of them
	// is judged from here (see health).
	since time.Time
}

func newHeartbeatBook(cli *clientv3.Client, self string, interval time.Duration, now func() time.Time) *heartbeatBook {
	b := &heartbeatBook{
		client:   cli,
		self:     self,
		interval: interval,
		now:      now,
		source:   etcdvalue.NewPrefix(cli, heartbeatPrefix, decodeHeartbeatRecord),
		loaded:   make(chan struct{}),
		own:      map[string]time.Time{},
		recorded: map[string]time.Time{},
	}
	b.source.Name = "curator-heartbeats"
	return b
}

// heard records that node id's heartbeat reached this curator at at.
func (b *heartbeatBook) heard(id string, at time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if at.After(b.own[id]) {
		b.own[id] = at
	}
	b.unwritten = true
}

// last is the newest heartbeat of node id this curator knows of, and
// whether it knows of any; since is when its knowledge began.
func (b *heartbeatBook) last(id string) (last time.Time, heard bool, since time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	o, ok1 := b.own[id]
	r, ok2 := b.recorded[id]
	if r.After(o) {
		o = r
	}
	return o, ok1 || ok2, b.since
}

// ages is how long ago each node known to the book last heartbeated.
func (b *heartbeatBook) ages(now time.Time) map[string]time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	ages := make(map[string]time.Duration, len(b.recorded)+len(b.own))
	for _, m := range []map[string]time.Time{b.recorded, b.own} {
		for id, at := range m {
			if a, ok := ages[id]; !ok || now.Sub(at) < a {
				ages[id] = max(now.Sub(at), 0)
			}
		}
	}
	return ages
}

// waitLoaded waits until the records were first read, so that a health
// judged afterwards takes every curator's heartbeats into account.
func (b *heartbeatBook) waitLoaded(ctx context.Context) error {
	select {
	case <-b.loaded:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// record writes this curator's record every interval in which it received
// a heartbeat: one etcd write per curator per interval at most, whatever
// the number of nodes, and none from a curator no node heartbeats to.
//
//	writes: etcd heartbeats/<this curator>
func (b *heartbeatBook) record(ctx context.Context) error {
	t := time.NewTicker(b.interval)
	defer t.Stop()
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		if err := b.write(ctx); err != nil {
			// The next interval writes again, with newer heartbeats.
			supervisor.Logger(ctx).Warn("recording heartbeats failed", zap.Error(err))
		}
	}
}

// write stores this curator's record if it received a heartbeat since the
// last write.
func (b *heartbeatBook) write(ctx context.Context) error {
	now := b.now()
	b.mu.Lock()
	if !b.unwritten {
		b.mu.Unlock()
		return nil
	}
	rec := &cpb.HeartbeatRecord{WrittenAt: timestamppb.New(now)}
	window := heartbeatWindow(b.interval)
	for id, at := range b.own {
		age := max(now.Sub(at), 0)
		if age > window {
			delete(b.own, id)
			continue
		}
		rec.Nodes = append(rec.Nodes, &cpb.HeardNode{NodeId: id, AgeMs: uint32(age / time.Millisecond)})
	}
	b.unwritten = false
	b.mu.Unlock()
	if len(rec.Nodes) > maxHeartbeatEntries {
		// Recorded partially rather than not at all; the rest is still
		// judged here, from own.
		rec.Nodes = rec.Nodes[:maxHeartbeatEntries]
	}
	v, err := proto.MarshalOptions{Deterministic: true}.Marshal(rec)
	if err == nil {
		wctx, cancel := context.WithTimeout(ctx, b.interval)
		defer cancel()
		_, err = b.client.Put(wctx, heartbeatKey(b.self), string(v))
	}
	if err != nil {
		b.mu.Lock()
		b.unwritten = true
		b.mu.Unlock()
		return fmt.Errorf("writing %d heartbeats: %w", len(rec.Nodes), err)
	}
	return nil
}

// follow reads every curator's record as it changes and merges it into
// recorded. It deletes records whose curator stopped writing long ago.
//
//	reads: etcd heartbeats/
func (b *heartbeatBook) follow(ctx context.Context) error {
	w := b.source.Watch()
	defer w.Close()
	for {
		snap, err := w.Get(ctx)
		if err != nil {
			return err
		}
		now := b.now()
		b.mu.Lock()
		for _, key := range snap.Changed {
			e, ok := snap.Entries[key]
			switch {
			case !ok:
			case e.Err != nil:
				supervisor.Logger(ctx).Error("ignoring a corrupt heartbeat record", zap.String("key", key), zap.Error(e.Err))
			default:
				written := e.Data.WrittenAt.AsTime()
				for _, n := range e.Data.Nodes {
					at := written.Add(-time.Duration(n.AgeMs) * time.Millisecond)
					if at.After(b.recorded[n.NodeId]) {
						b.recorded[n.NodeId] = at
					}
				}
			}
		}
		stale := staleRecordAge(b.interval)
		for id, at := range b.recorded {
			if now.Sub(at) > stale {
				delete(b.recorded, id)
			}
		}
		if b.since.IsZero() {
			b.since = now
		}
		b.mu.Unlock()
		b.loadOnce.Do(func() {
			close(b.loaded)
			supervisor.Signal(ctx, supervisor.SignalHealthy)
		})
		for key, e := range snap.Entries {
			if e.Err != nil || key == heartbeatKey(b.self) || now.Sub(e.Data.WrittenAt.AsTime()) <= stale {
				continue
			}
			// Only if unchanged since read: a curator that came back
			// and wrote again keeps its record.
			if _, err := b.client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", int64(e.Version))).Then(clientv3.OpDelete(key)).Commit(); err != nil {
				supervisor.Logger(ctx).Warn("deleting a stale heartbeat record failed", zap.String("key", key), zap.Error(err))
			}
		}
	}
}

// decodeHeartbeatRecord parses a stored record and checks it: the key
// names a node, the record is not oversized, every entry names a node once.
func decodeHeartbeatRecord(key, value []byte) (*cpb.HeartbeatRecord, error) {
	if value == nil {
		return nil, nil // deleted
	}
	id, ok := strings.CutPrefix(string(key), heartbeatPrefix)
	if !ok {
		return nil, fmt.Errorf("key %q is not a heartbeat record", key)
	}
	if err := identity.ValidateNodeID(id); err != nil {
		return nil, fmt.Errorf("heartbeat record %q: %w", key, err)
	}
	if len(value) > maxHeartbeatRecordSize {
		return nil, fmt.Errorf("heartbeat record of %s: %d bytes, more than the %d allowed", id, len(value), maxHeartbeatRecordSize)
	}
	var rec cpb.HeartbeatRecord
	if err := proto.Unmarshal(value, &rec); err != nil {
		return nil, fmt.Errorf("heartbeat record of %s: %w", id, err)
	}
	if err := checkNoUnknownFields("heartbeat record of "+id, &rec); err != nil {
		return nil, err
	}
	if err := rec.WrittenAt.CheckValid(); err != nil {
		return nil, fmt.Errorf("heartbeat record of %s: written_at: %w", id, err)
	}
	if len(rec.Nodes) > maxHeartbeatEntries {
		return nil, fmt.Errorf("heartbeat record of %s: %d entries, more than the %d allowed", id, len(rec.Nodes), maxHeartbeatEntries)
	}
	seen := make(map[string]bool, len(rec.Nodes))
	for _, n := range rec.Nodes {
		if err := identity.ValidateNodeID(n.NodeId); err != nil {
			return nil, fmt.Errorf("heartbeat record of %s: %w", id, err)
		}
		if seen[n.NodeId] {
			return nil, fmt.Errorf("heartbeat record of %s: node %s listed twice", id, n.NodeId)
		}
		seen[n.NodeId] = true
	}
	return &rec, nil
}
