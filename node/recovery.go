package node

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/polis-os/polis/consensus"
	"github.com/polis-os/polis/supervisor"
)

// recoverConsensus prepares this node's consensus member to restart as the
// single member of its cluster (Config.RecoverConsensus). The role server
// then restarts the member from its data as on any restart of a consensus
// member, etcd forces the new membership, and the curator, once it leads,
// drops the lost members from its records.
func (n *Node) recoverConsensus(ctx context.Context) error {
	logger := supervisor.Logger(ctx)
	dir := n.root.Data.Etcd.Path
	lost, err := consensus.PrepareRecovery(ctx, dir)
	switch {
	case errors.Is(err, consensus.ErrAlone):
		// Started again with the same request after the recovery: an
		// ordinary start.
		logger.Info("asked to recover the consensus, but this node's member is already the only one: starting as usual")
		return nil
	case err != nil:
		return fmt.Errorf("recovering the cluster on this node's consensus data (%s): %w", dir, err)
	}
	logger.Warn("recovering the cluster on this node's consensus data: its member restarts as the single member, keeping all data",
		zap.String("dir", dir), zap.Strings("lost", lost))
	return nil
}
