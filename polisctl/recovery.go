package polisctl

import (
	"fmt"
	"io"
	"strings"
	"time"

	cpb "github.com/polis-os/polis/api/curator/v1"
)

// writeRecovery adds the cluster's last recovery after quorum loss to
// cluster info, if it had one: an operator looking at a cluster should
// know it once lost its quorum, when, and which members it lost.
func writeRecovery(w io.Writer, r *cpb.ClusterRecovery) error {
	if r == nil {
		return nil
	}
	from := r.From
	switch from {
	case "member-data":
		from = "the consensus data of " + r.NodeId
	case "backup":
		from = "a backup restored onto " + r.NodeId
	}
	fmt.Fprintf(w, "Recovered at:             %s, from %s\n", r.RecoveredAt.AsTime().UTC().Format(time.RFC3339), from)
	lost := "none"
	if len(r.LostNodeIds) > 0 {
		lost = strings.Join(r.LostNodeIds, ", ")
	}
	fmt.Fprintf(w, "Lost consensus members:   %s\n", lost)
	return nil
}
