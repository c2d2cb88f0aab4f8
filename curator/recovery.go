package curator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/consensus"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/supervisor"
)

// After a recovery from quorum loss (consensus.PrepareRecovery), etcd's
// membership holds the survivor alone, but the node records still give
// ConsensusMember to the lost members: the cluster directory would list
// their curators, and their peer certificates are still valid. Each new
// leader compares etcd's recovery record with its own (recoveryKey); for a
// recovery it has not followed up yet, it drops the lost members as
// UpdateNodeRoles would take ConsensusMember away (member and certificate
// first, record after), writes its record, and leaves an audit line. A
// crash half-way is finished by the next leader, since the record is
// written last.

// recoveryTimeout bounds one follow-up.
const recoveryTimeout = time.Minute

// runRecovery follows up the cluster's last recovery once per leader term.
//
//	reads:  s.leader, the consensus member's recovery record
//	writes: node records of lost members, recoveryKey
func (s *Service) runRecovery(ctx context.Context) error {
	return s.oncePerTerm(ctx, recoveryTimeout, "following up the cluster's recovery", s.followUpRecovery)
}

func (s *Service) followUpRecovery(ctx context.Context, l *leaderState) error {
	st, err := event.Get(ctx, s.cfg.Consensus, event.Filter(consensus.IsVoter))
	if err != nil {
		return err
	}
	rec, err := st.Recovery(ctx)
	if err != nil || rec == nil {
		return err
	}
	want := &cpb.ClusterRecovery{
		RecoveredAt: timestamppb.New(rec.At),
		NodeId:      rec.Member,
		From:        rec.From,
		LostNodeIds: slices.Clone(rec.Lost),
	}
	have, err := s.lastRecovery(ctx)
	if err != nil {
		return err
	}
	if proto.Equal(have, want) {
		return nil
	}
	logger := supervisor.Logger(ctx)
	l.membership.Lock()
	defer l.membership.Unlock()
	for _, id := range rec.Lost {
		// Revokes the certificate of a member etcd no longer has.
		if err := st.Remove(ctx, id); err != nil && !errors.Is(err, consensus.ErrNoMember) {
			return fmt.Errorf("removing lost member %s: %w", id, err)
		}
		_, err := updateNode(ctx, l.leadership, s.cfg.Client, id, func(n *cpb.Node) (*cpb.Node, error) {
			if n == nil || n.Roles == nil {
				return nil, nil
			}
			n.Roles.ConsensusMember = nil
			n.Roles.KubernetesController = nil
			return n, nil
		})
		if err != nil {
			return fmt.Errorf("taking ConsensusMember from lost member %s: %w", id, err)
		}
	}
	b, err := proto.Marshal(want)
	if err != nil {
		return err
	}
	if _, _, err := l.leadership.Txn(ctx, nil, []clientv3.Op{clientv3.OpPut(recoveryKey, string(b))}, nil); err != nil {
		return err
	}
	logger.Warn("cluster recovered after losing its quorum: lost consensus members dropped",
		zap.Time("recovered_at", rec.At),
		zap.String("node", rec.Member),
		zap.String("from", rec.From),
		zap.Strings("lost", rec.Lost),
	)
	return nil
}

// lastRecovery reads the recovery the curator recorded, nil if none.
func (s *Service) lastRecovery(ctx context.Context) (*cpb.ClusterRecovery, error) {
	resp, err := s.cfg.Client.Get(ctx, recoveryKey)
	if err != nil {
		return nil, fmt.Errorf("reading the recovery record: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	var r cpb.ClusterRecovery
	if err := proto.Unmarshal(resp.Kvs[0].Value, &r); err != nil {
		return nil, fmt.Errorf("parsing the recovery record: %w", err)
	}
	return &r, nil
}
