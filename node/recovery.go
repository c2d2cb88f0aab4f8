package node

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/polis-os/polis/consensus"
)

// PrepareRecovery carries out Config.RecoverConsensus: it prepares this
// node's stopped consensus member to restart as the single member of its
// cluster. The role server then restarts the member from its data as on
// any restart of a consensus member, etcd forces the new membership, and
// the curator, once it leads, drops the lost members from its records.
//
// polis-node calls it before Run, so that a refusal (another member
// answers, no member data) ends the program with its error; Run calls it
// itself if nobody did, and then a refusal fails Run, which its
// supervisor restarts. A member that is already alone starts as usual.
func (n *Node) PrepareRecovery(ctx context.Context, logger *zap.Logger) error {
	if !n.cfg.RecoverConsensus || n.recovered {
		return nil
	}
	dir := n.root.Data.Etcd.Path
	lost, err := consensus.PrepareRecovery(ctx, dir)
	switch {
	case errors.Is(err, consensus.ErrAlone):
		// Started again with the same request after the recovery: an
		// ordinary start.
		logger.Info("asked to recover the consensus, but this node's member is already the only one: starting as usual")
	case err != nil:
		return fmt.Errorf("recovering the cluster on this node's consensus data (%s): %w", dir, err)
	default:
		logger.Warn("recovering the cluster on this node's consensus data: its member restarts as the single member, keeping all data",
			zap.String("dir", dir), zap.Strings("lost", lost))
	}
	n.recovered = true
	return nil
}
