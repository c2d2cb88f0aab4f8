package curator

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/consensus"
)

// Bounds of a SnapshotPolicy's interval: below a second, snapshots would
// be a load of their own; above a week, they would be too old to help.
const (
	minSnapshotInterval = time.Second
	maxSnapshotInterval = 7 * 24 * time.Hour
)

// maxReportedSnapshots is the most consensus_snapshots a node status may
// list: a member keeps at most consensus.MaxSnapshotKeep.
const maxReportedSnapshots = consensus.MaxSnapshotKeep

// CheckSnapshotPolicy checks a policy given at bootstrap (nil is the
// defaults), with an error naming the field that is wrong. Bootstrap
// checks it; the node agent checks its parameters with it first.
func CheckSnapshotPolicy(p *cpb.SnapshotPolicy) error {
	if p == nil {
		return nil
	}
	if err := checkNoUnknownFields("snapshot policy", p); err != nil {
		return err
	}
	var errs []error
	if p.Interval != nil {
		if err := p.Interval.CheckValid(); err != nil {
			errs = append(errs, fmt.Errorf("interval: %w", err))
		} else if d := p.Interval.AsDuration(); d < minSnapshotInterval || d > maxSnapshotInterval {
			errs = append(errs, fmt.Errorf("interval %s: want between %s and %s", d, minSnapshotInterval, maxSnapshotInterval))
		}
	}
	if p.Keep > consensus.MaxSnapshotKeep {
		errs = append(errs, fmt.Errorf("keep %d: at most %d snapshots are kept", p.Keep, consensus.MaxSnapshotKeep))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("snapshot policy: %w", err)
	}
	return nil
}

// withSnapshotDefaults returns p (nil: the defaults) with its unset fields
// filled in.
func withSnapshotDefaults(p *cpb.SnapshotPolicy) *cpb.SnapshotPolicy {
	res := &cpb.SnapshotPolicy{Interval: durationpb.New(consensus.DefaultSnapshotInterval), Keep: consensus.DefaultSnapshotKeep}
	if p.GetInterval() != nil {
		res.Interval = p.Interval
	}
	if p.GetKeep() != 0 {
		res.Keep = p.Keep
	}
	return res
}

// SnapshotPolicy reads the cluster's snapshot policy from the curator's
// state through cli (a client of the curator's namespace), defaults filled
// in. The read is serializable: it is answered by the local member alone,
// so members keep their snapshots while the cluster has no quorum, which
// is when they matter.
func SnapshotPolicy(ctx context.Context, cli *clientv3.Client) (*cpb.SnapshotPolicy, error) {
	resp, err := cli.Get(ctx, snapshotPolicyKey, clientv3.WithSerializable())
	if err != nil {
		return nil, fmt.Errorf("reading the snapshot policy: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return withSnapshotDefaults(nil), nil
	}
	var p cpb.SnapshotPolicy
	if err := proto.Unmarshal(resp.Kvs[0].Value, &p); err != nil {
		return nil, fmt.Errorf("parsing the snapshot policy: %w", err)
	}
	if err := CheckSnapshotPolicy(&p); err != nil {
		return nil, fmt.Errorf("the stored %w", err)
	}
	return withSnapshotDefaults(&p), nil
}

// ConsensusSnapshotPolicy is SnapshotPolicy as the consensus Snapshotter
// takes it.
func ConsensusSnapshotPolicy(ctx context.Context, cli *clientv3.Client) (consensus.SnapshotPolicy, error) {
	p, err := SnapshotPolicy(ctx, cli)
	if err != nil {
		return consensus.SnapshotPolicy{}, err
	}
	return consensus.SnapshotPolicy{Interval: p.Interval.AsDuration(), Keep: int(p.Keep)}, nil
}

// checkConsensusSnapshots checks the snapshots a node status lists.
func checkConsensusSnapshots(snaps []*cpb.ConsensusSnapshot) []error {
	if len(snaps) > maxReportedSnapshots {
		return []error{fmt.Errorf("consensus_snapshots lists %d snapshots, more than %d", len(snaps), maxReportedSnapshots)}
	}
	var errs []error
	for i, s := range snaps {
		if s == nil {
			errs = append(errs, fmt.Errorf("consensus_snapshots[%d] is empty", i))
			continue
		}
		if err := s.TakenAt.CheckValid(); err != nil {
			errs = append(errs, fmt.Errorf("consensus_snapshots[%d].taken_at: %w", i, err))
		}
		if s.Revision < 0 || s.Size < 0 {
			errs = append(errs, fmt.Errorf("consensus_snapshots[%d]: revision %d and size %d must not be negative", i, s.Revision, s.Size))
		}
	}
	return errs
}
